// Package confine runs agent processes confined to their sandbox, without
// privileges and without anything but this binary.
//
// The server starts every agent through a launcher: its own binary again
// (/proc/self/exe, with a reserved first argument that main checks before
// the CLI parses anything), cloned into new user, PID, mount, network and
// IPC namespaces with the server's uid and gid mapped to themselves (and,
// where the server is root, AgentID, the uid agents then run as). The
// launcher reads what to run (a spec) from an inherited pipe and then, as
// PID 1 of its namespace:
//
//   - makes every mount private, mounts a fresh /proc (only the sandbox's
//     processes are in it), covers /tmp, /run and the server user's home
//     with empty tmpfs mounts and binds back only the paths the agent is
//     given, gives it its own /dev/shm and, when it can, its own devpts;
//   - brings up the namespace's loopback, and listens there on the host
//     ports it is given (forward_linux.go);
//   - sets rlimits (core dumps off, open files, processes);
//   - joins an empty session keyring (it was started in a session of its
//     own, so the server's terminal is no /dev/tty of the agent's either);
//   - drops every capability the agent would inherit;
//   - applies Landlock to itself and so to everything it starts: the
//     system read-only, the agent's install directory and the paths its
//     command line names read-only (argpaths.go), the sandbox's work, home
//     and tmp read-write (not the sandbox directory: the server's
//     agent.log is there), a few device files, and, where the
//     kernel's Landlock ABI has them, the signal and abstract unix socket
//     scopes; no_new_privs comes with it;
//   - loads a seccomp filter (seccomp_linux.go), on itself and so on
//     everything it starts;
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
// Prepare fails, or the probe does (the launcher started once with a check
// as its agent that tries from inside what it must not do), and the server
// refuses to start rather than run agents bare.
//
// The seccomp filter denies what no namespace or Landlock rule covers and
// no coding agent needs, as Docker's default profile and Flatpak's do,
// with EPERM unless said: the kernel keyrings (keyctl, add_key,
// request_key: they are not namespaced, so the server user's keys were
// one link away); new namespaces (unshare and clone with any CLONE_NEW*
// flag, setns; clone3, whose flags the filter cannot read, answers ENOSYS
// so that glibc and Go fall back to clone), which would give the agent
// capabilities over fresh namespaces and their kernel surface (nf_tables,
// mounts); every mount call, old and new API; bpf and perf_event_open;
// userfaultfd (a tool to win kernel races); modules, kexec, reboot, swap,
// acct, quotas and the kernel log; iopl, ioperm and modify_ldt; file
// handles (open_by_handle_at opens any file of a filesystem past the
// directories hiding it); obsolete calls; personalities other than
// Docker's five; io_uring (ENOSYS: syscalls the filter never sees; libuv
// falls back); the ioctls TIOCSTI and TIOCLINUX (typing into a terminal),
// by the low 32 bits the kernel reads. Calls of another ABI (i386 or x32
// on amd64, 32-bit ARM on arm64) answer ENOSYS whatever they are, so they
// cannot go around the list. ptrace stays: the PID namespace and Landlock
// keep it inside the sandbox, where debuggers need it. The filter is
// built for linux/amd64 and linux/arm64; elsewhere the launcher fails.
//
// Memory (the agent's tmpfs mounts counted in) and processes are bounded
// by a cgroup per agent where the server may make one: v2 when its cgroup
// is delegated to it, else v1 when it may write it (root); otherwise by
// the launcher's memory guard, which polls the namespace's processes and
// stops the agent past its limit, and by RLIMIT_NPROC (cgroup_linux.go,
// memguard_linux.go).
//
// Network. Every agent has a network namespace of its own, so the host's
// loopback (the API, other sandboxes' servers, a developer's database)
// and the sockets of other network namespaces, abstract unix sockets
// included, are never the agent's. The host ports the operator names are
// forwarded one connection at a time (hostports_linux.go): the launcher
// listens on them in the namespace and the server, which alone holds a
// socket that can connect to the host's loopback, dials them and passes
// the connected socket in. With network open, pasta (passt, as Podman runs
// it rootless) gives the namespace a route out, and is told to forward
// nothing inbound and nothing to the host's loopback (pasta_linux.go).
// pasta rather than a filtering HTTP(S) proxy the server would run:
// pasta works for every program and protocol unchanged (TCP, UDP, ping),
// while a proxy works only for programs that honour HTTP(S)_PROXY, and
// node, which runs most agents, does not by itself (its fetch ignores the
// variables); git over ssh, package managers and DNS would each need its
// own setting. A proxy could filter by host name, which pasta cannot:
// open is all or nothing beyond the host's loopback. Where pasta is not
// installed, agents get network none unless the operator asked for open.
package confine
