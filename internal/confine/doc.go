// Package confine runs agent processes confined to their sandbox, without
// privileges and without anything but this binary.
//
// The server starts every agent through a launcher: its own binary again
// (/proc/self/exe, with a reserved first argument that main checks before
// the CLI parses anything), cloned into new user, PID and mount namespaces
// (and a network namespace for network "none") with the server's uid and
// gid mapped to themselves. The launcher reads what to run (a spec) from an
// inherited pipe and then, as PID 1 of its namespace:
//
//   - makes every mount private, mounts a fresh /proc (only the sandbox's
//     processes are in it), covers /tmp, /run and the server user's home
//     with empty tmpfs mounts and binds back only the paths the agent is
//     given, gives it its own /dev/shm and, when it can, its own devpts;
//   - with network none, brings up the namespace's loopback;
//   - sets rlimits (core dumps off, open files, processes);
//   - joins an empty session keyring (it was started in a session of its
//     own, so the server's terminal is no /dev/tty of the agent's either);
//   - drops every capability the agent would inherit;
//   - applies Landlock to itself and so to everything it starts: the
//     system read-only, the agent's install directory read-only, the
//     sandbox's work, home and tmp read-write (not the sandbox directory:
//     the server's agent.log is there), a few device files, and, where the
//     kernel's Landlock ABI has them, the signal and abstract unix socket
//     scopes; no_new_privs comes with it;
//   - starts the agent, reaps every orphan, forwards SIGTERM, SIGINT and
//     SIGHUP, and exits with the agent's status.
//
// When PID 1 of a namespace exits the kernel kills every process in it, so
// whatever the agent started dies with the agent, with its sandbox, and
// with the server: the launcher exits when the server's end of its spec
// pipe closes (the lifeline, certain even when the server is SIGKILLed) and
// also has SIGKILL as its parent-death signal.
//
// Why these mechanisms: they need no root, no setuid helper and no second
// binary, so they work for a developer on a laptop as for a service; the
// namespaces hide what Landlock cannot (other processes, sockets on
// kernels whose Landlock cannot filter connect), and Landlock denies what
// the mounts alone would leave reachable. Where the kernel lacks any of it,
// New fails and the server refuses to start rather than run agents bare.
//
// Cgroup v2 limits (pids.max, memory.max) are added when the server runs in
// a cgroup it may manage (delegated); otherwise rlimits are the limits.
package confine
