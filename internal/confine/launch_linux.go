package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitSetup is the launcher's exit status when it could not confine the
// agent; the agent was never started. Its reason is on stderr (agent.log).
const exitSetup = 125

// Main is the launcher (or the probe's check): main calls it first thing
// when IsEntry(os.Args). It never returns.
func Main() {
	if os.Args[1] == checkArg {
		os.Exit(check(os.Args[2:]))
	}
	// Capabilities are per thread, and the agent is forked from the thread
	// that drops them: everything below runs on this one.
	runtime.LockOSThread()
	code, err := launch()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sparkles launcher: %v\n", err)
		os.Exit(exitSetup)
	}
	os.Exit(code)
}

func launch() (int, error) {
	lifeline := os.NewFile(3, "lifeline")
	if lifeline == nil {
		return 0, errors.New("no spec on fd 3: the launcher is started by sparkles serve only")
	}
	syscall.CloseOnExec(3) // the agent must not hold the server's pipe
	var sp spec
	if err := json.NewDecoder(lifeline).Decode(&sp); err != nil {
		return 0, fmt.Errorf("read spec: %w", err)
	}
	// The server never writes again: the pipe ends when the server lets go
	// of the agent or dies, however it dies. Exiting then, as PID 1, takes
	// everything in the namespace with it.
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		os.Exit(137)
	}()

	if err := mountAll(&sp); err != nil {
		return 0, err
	}
	// Every agent has a network namespace of its own (pasta has given an
	// open one its route out by now): its loopback is its own too.
	if err := loopbackUp(); err != nil {
		return 0, fmt.Errorf("bring up loopback: %w", err)
	}
	if err := forwardHostPorts(sp.HostPorts); err != nil {
		return 0, err
	}
	if err := setLimits(sp); err != nil {
		return 0, err
	}
	// The server's session keyring (Kerberos tickets, ecryptfs keys) is
	// no business of the agent's: it gets an empty one of its own.
	if _, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("new session keyring: %w", err)
	}
	if err := dropCaps(); err != nil {
		return 0, err
	}
	if err := restrict(sp); err != nil {
		return 0, err
	}
	if err := installSeccomp(); err != nil {
		return 0, fmt.Errorf("seccomp: %w", err)
	}
	return run(sp)
}

// run starts the agent and is its init: it reaps every process that ends
// in the namespace and returns the agent's status once the agent is gone.
func run(sp spec) (int, error) {
	var g *guard
	if sp.MemoryGuard > 0 {
		var err error
		if g, err = newGuard(sp.MemoryMax, sp.MemoryGuard); err != nil {
			return 0, err
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	p, err := os.StartProcess(sp.Path, sp.Args, &os.ProcAttr{
		Dir:   sp.Dir,
		Env:   sp.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: agentCredential(sp.AgentID)},
	})
	if err != nil {
		return 0, fmt.Errorf("start agent: %w", unwrap(err))
	}
	// The agent holds the pipes now; the server sees their ends close when
	// the agent's side does, not when the launcher's does.
	os.Stdin.Close()
	os.Stdout.Close()
	if g != nil {
		go g.run()
	}
	go func() {
		for s := range sigs {
			_ = p.Signal(s)
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait: %w", err)
		}
		if pid != p.Pid {
			continue // an orphan of the agent's, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), nil
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		}
	}
}

// loopbackUp brings up lo, the only interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setLimits bounds what one agent can take of the machine. The launcher
// is root of nothing: it can only lower limits.
func setLimits(sp spec) error {
	lower := func(name string, res int, v uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err != nil {
			return err
		}
		lim := unix.Rlimit{Cur: min(v, cur.Max), Max: min(v, cur.Max)}
		if err := unix.Setrlimit(res, &lim); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		return nil
	}
	if err := lower("RLIMIT_CORE", unix.RLIMIT_CORE, 0); err != nil {
		return err
	}
	if sp.NoFile > 0 {
		if err := lower("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, sp.NoFile); err != nil {
			return err
		}
	}
	if sp.MaxProcs > 0 {
		if err := lower("RLIMIT_NPROC", unix.RLIMIT_NPROC, sp.MaxProcs); err != nil {
			return err
		}
	}
	return nil
}

// dropCaps leaves the agent no capability, even in its own user namespace
// and even when the server runs as root: the bounding set, the inheritable
// set and the ambient set are emptied on this thread, the one the agent is
// forked from. The launcher keeps its own permitted set, so the agent
// cannot ptrace it either.
func dropCaps() error {
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	var n int
	if _, err := fmt.Sscan(string(last), &n); err != nil {
		return fmt.Errorf("cap_last_cap: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= n; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	return nil
}
