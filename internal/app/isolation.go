package app

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// Isolation: the launcher that confines agent processes, its checks of
// the options and of every agent's settings, and the wait for its probe.

// planIsolation settles what needs no kernel: isolation off (and what it
// forbids), a mode serve does not know, no agent processes. Where agents
// are to be confined it returns the launcher the coordinator starts them
// through, which confineAgents prepares once the server serves.
func (m *Main) planIsolation() (*lateLauncher, error) {
	switch {
	case m.Isolation == "off":
		if m.Confine.Network == confine.NetworkNone {
			return nil, errors.New("--agent-network none needs isolation; drop --isolation=off")
		}
		for _, name := range m.Agents.Names() {
			if m.Agents[name].Confined() {
				return nil, fmt.Errorf("agent %q sets network, read_paths, write_paths or host_ports, which need isolation; drop --isolation=off or those settings", name)
			}
		}
		m.setIsolation("off")
		m.Logger.Warn("agents run unconfined, with the server user's rights (--isolation=off)")
		return nil, nil
	case m.Isolation != "" && m.Isolation != "on":
		return nil, fmt.Errorf("--isolation %q: want on or off", m.Isolation)
	case len(m.Agents) == 0:
		m.setIsolation("none needed: no agent processes")
		return nil, nil
	}
	return &lateLauncher{ready: make(chan struct{})}, nil
}

// confineAgents prepares the launcher that confines agent processes,
// checks every agent's settings against it and runs its probe, and fails,
// naming the flag that switches confinement off, where the machine cannot:
// never run agents unconfined without being told to.
func (m *Main) confineAgents() error {
	opts := m.Confine
	opts.DataDir, opts.Logger = m.DataDir, m.Logger
	l, err := confine.Prepare(opts)
	var bad *confine.OptionError
	if errors.As(err, &bad) {
		flag := map[string]string{"Network": "--agent-network", "ReadPaths": "--agent-read-path", "WritePaths": "--agent-write-path", "MemoryMax": "--agent-memory-max", "HostPorts": "--agent-host-port"}[bad.Field]
		return fmt.Errorf("%s %s", flag, bad.Msg)
	}
	if err != nil {
		return notConfinable(err)
	}
	for _, name := range m.Agents.Names() {
		a := m.Agents[name]
		if err := l.Check(confinementOf(a)); errors.As(err, &bad) {
			field := map[string]string{"Network": "network", "ReadPaths": "read_paths", "WritePaths": "write_paths", "HostPorts": "host_ports"}[bad.Field]
			return fmt.Errorf("agent %q: %s %s", name, field, bad.Msg)
		}
		if err := l.CheckCommandLine(a.Argv()); err != nil {
			return fmt.Errorf("agent %q: %v", name, err)
		}
	}
	if err := l.Probe(); err != nil {
		return notConfinable(err)
	}
	m.Launcher = l
	return nil
}

// notConfinable is the error of a start whose agents cannot be confined
// here, for the reason err.
func notConfinable(err error) error {
	return fmt.Errorf("%w: %v; pass --isolation=off (SPARKLES_ISOLATION=off) to run them unconfined, with the server user's rights", ErrNotConfinable, err)
}

// lateLauncher is the launcher the coordinator starts agents through while
// the real one is prepared and probed, which begins once the server
// serves: every start waits for it, and fails with its error.
type lateLauncher struct {
	ready chan struct{}
	l     *confine.Launcher
	err   error
}

// settle gives the launcher, or why there is none, to every start.
func (p *lateLauncher) settle(l *confine.Launcher, err error) {
	p.l, p.err = l, err
	close(p.ready)
}

func (p *lateLauncher) launcher() (*confine.Launcher, error) {
	<-p.ready
	return p.l, p.err
}

func (p *lateLauncher) Start(cmd *exec.Cmd, sandbox string, extra agent.Confinement) (func(), error) {
	l, err := p.launcher()
	if err != nil {
		return nil, err
	}
	return l.Start(cmd, sandbox, extra)
}

// Grants, Isolation and ExitReason answer as the launcher does, for an
// agents check and an agent's exit (Linux's launcher has the first and
// the last).
type (
	granter interface {
		Grants([]string) ([]string, error)
	}
	exitReasoner interface{ ExitReason(*exec.Cmd) string }
)

func (p *lateLauncher) Grants(argv []string) ([]string, error) {
	l, err := p.launcher()
	if err != nil {
		return nil, err
	}
	if g, ok := any(l).(granter); ok {
		return g.Grants(argv)
	}
	return nil, nil
}

func (p *lateLauncher) Isolation() string {
	l, err := p.launcher()
	if err != nil {
		return "none: " + err.Error()
	}
	return l.Isolation()
}

func (p *lateLauncher) ExitReason(cmd *exec.Cmd) string {
	l, err := p.launcher()
	if err != nil {
		return ""
	}
	if r, ok := any(l).(exitReasoner); ok {
		return r.ExitReason(cmd)
	}
	return ""
}

// launcher keeps a nil *lateLauncher from becoming a non-nil interface.
func launcher(l *lateLauncher) agent.Launcher {
	if l == nil {
		return nil
	}
	return l
}

// confinementOf is what an agent's registry entry adds to the confinement.
func confinementOf(a registry.Agent) agent.Confinement {
	return agent.Confinement{Network: a.Network, ReadPaths: a.ReadPaths, WritePaths: a.WritePaths, HostPorts: a.HostPorts}
}

// waitProbe waits for the confinement probe's verdict, which Run returns
// with: a server whose agents cannot be confined does not start.
func (m *Main) waitProbe(ctx context.Context) error {
	select {
	case err := <-m.probed:
		m.probeDone.Store(true)
		if err != nil {
			return err
		}
		if m.Launcher != nil {
			// Named only now: the limits are found by the probe's start
			// (see confine.Launcher.cgroups).
			m.setIsolation(m.Launcher.Isolation())
			m.Logger.Info("agents are confined", append([]any{"isolation", m.isolationNow()}, m.Launcher.LogAttrs()...)...)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isolationChecked is what /readyz names the confinement until the probe
// passed: what confines agents, their limits included, is known then.
const isolationChecked = "being checked"

func (m *Main) setIsolation(s string) { m.isolation.Store(&s) }

// isolationNow names what confines agents, for /readyz and the log.
func (m *Main) isolationNow() string {
	if s := m.isolation.Load(); s != nil {
		return *s
	}
	return isolationChecked
}
