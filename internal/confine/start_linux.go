package confine

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Starting the launcher in place of an agent: cloned into namespaces of
// its own, in its cgroup and with its network before it reads the spec,
// and why its limits stopped it once it has been waited for.

// start starts the launcher for sp in place of cmd.
func (l *Launcher) start(cmd *exec.Cmd, sp spec) (func(), error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cgs, _ := l.cgroups()
	cg, err := cgs.create(filepath.Base(sp.Sandbox), l.opts.MaxProcs, l.opts.MemoryMax)
	if err != nil {
		l.opts.Logger.Warn("no cgroup for this agent: its memory guard bounds it", "err", err)
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{"sparkles", launcherArg}
	cmd.Env = []string{}
	nw, err := l.newAgentNet(sp)
	if err != nil {
		w.Close()
		r.Close()
		cg.closeFD()
		cg.remove()
		return nil, err
	}
	cmd.ExtraFiles = append([]*os.File{r}, nw.files()...)
	cmd.SysProcAttr = l.sysProcAttr(cg)
	err = cmd.Start()
	r.Close()
	cg.closeFD()
	if err != nil {
		w.Close()
		nw.stop()
		cg.remove()
		return nil, fmt.Errorf("start the launcher: %w", err)
	}
	// Before the spec is written, as the cgroup below: the agent starts
	// with its network in place.
	l.connectNet(nw, sp, cmd.Process.Pid)
	// Before the spec is written: the launcher waits for it, so nothing of
	// the agent runs outside the cgroup.
	joinErr := cg.join(cmd.Process.Pid)
	if joinErr != nil {
		l.opts.Logger.Warn("the agent's cgroup could not take it: its memory guard bounds it", "err", joinErr)
	}
	sp.MemoryMax = l.opts.MemoryMax
	if cg == nil || joinErr != nil {
		sp.MemoryGuard = guardEvery
	}
	body, err := json.Marshal(sp)
	if err != nil {
		w.Close() // the launcher exits: it has no spec
		nw.stop()
		return nil, err
	}
	// The pipe buffer may be smaller than the spec: the launcher reads it
	// while this writes. The write end stays open as the lifeline.
	go func() { _, _ = w.Write(body) }()
	return func() {
		w.Close()
		nw.stop()
		l.explain(cmd, cg, sp)
		if err := cg.remove(); err != nil {
			l.opts.Logger.Warn("agent cgroup", "err", err)
		}
	}, nil
}

// explain keeps why the agent's limits stopped it, once cmd has been
// waited for, for ExitReason; with a cgroup, the launcher could not say it
// on the agent's stderr, so it is said there too.
func (l *Launcher) explain(cmd *exec.Cmd, cg *cgroup, sp spec) {
	limit := sizeText(sp.MemoryMax)
	var why string
	switch n := cg.oomKills(); {
	case sp.MemoryGuard > 0 && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == exitMemory:
		why = fmt.Sprintf("the agent used more than its memory limit of %s (--agent-memory-max) and was stopped", limit)
	case n > 0:
		why = fmt.Sprintf("the kernel killed %d of the agent's processes at its memory limit of %s (--agent-memory-max)", n, limit)
		if cmd.Stderr != nil {
			fmt.Fprintf(cmd.Stderr, "sparkles launcher: %s\n", why)
		}
	default:
		return
	}
	l.reasons.Store(cmd, why)
}

// ExitReason says why an agent started with cmd was stopped by its
// limits, once it has been waited for; "" when they did not stop it.
func (l *Launcher) ExitReason(cmd *exec.Cmd) string {
	why, _ := l.reasons.LoadAndDelete(cmd)
	s, _ := why.(string)
	return s
}

// sysProcAttr clones the launcher into namespaces of its own, as the
// server's own uid and gid, with the capabilities it needs to build the
// agent's view kept across its exec (ambient); they stay inside its user
// namespace and it drops them for the agent.
func (l *Launcher) sysProcAttr(cg *cgroup) *syscall.SysProcAttr {
	// A network namespace whatever the network: the host's loopback is
	// never the agent's (pasta gives an open one its route out).
	// An IPC namespace of its own too: SysV shared memory and message
	// queues are otherwise the host's, outlive the agent, and are memory
	// no limit of the agent's sees.
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC)
	uid, gid := os.Getuid(), os.Getgid()
	uids := []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	gids := []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	if l.agentID != 0 {
		// The launcher stays root of the namespace (it binds root's 0700
		// directories into the agent's view); the agent runs as AgentID.
		uids = append(uids, syscall.SysProcIDMap{ContainerID: l.agentID, HostID: l.agentID, Size: 1})
		gids = append(gids, syscall.SysProcIDMap{ContainerID: l.agentID, HostID: l.agentID, Size: 1})
	}
	a := &syscall.SysProcAttr{
		// A session of its own: the server's controlling terminal (a
		// developer's shell) is no /dev/tty of the agent's. Its process
		// group is its pid, as Setpgid would make it, for killGroup.
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  flags,
		UidMappings: uids,
		GidMappings: gids,
		// Root may let the launcher set the agent's groups (none); anyone
		// else must deny setgroups to map a gid at all.
		GidMappingsEnableSetgroups: l.agentID != 0,
		// NET_BIND_SERVICE: host ports below 1024 are the launcher's to
		// listen on in the namespace.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP},
	}
	if cg != nil && cg.fd >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, cg.fd
	}
	return a
}
