package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// Isolation: the launcher that confines agent processes, its checks of
// the options and of every agent's settings, and the wait for its probe.

// openLauncher confines agent processes unless isolation is off, and
// fails, naming the flag that switches it off, where the machine cannot:
// never run agents unconfined without being told to.
func (m *Main) openLauncher() error {
	switch {
	case m.Isolation == "off":
		if m.Confine.Network == confine.NetworkNone {
			return errors.New("--agent-network none needs isolation; drop --isolation=off")
		}
		for _, name := range m.Agents.Names() {
			if m.Agents[name].Confined() {
				return fmt.Errorf("agent %q sets network, read_paths, write_paths or host_ports, which need isolation; drop --isolation=off or those settings", name)
			}
		}
		m.setIsolation("off")
		m.Logger.Warn("agents run unconfined, with the server user's rights (--isolation=off)")
		return nil
	case m.Isolation != "" && m.Isolation != "on":
		return fmt.Errorf("--isolation %q: want on or off", m.Isolation)
	case len(m.Agents) == 0:
		m.setIsolation("none needed: no agent processes")
		return nil
	}
	opts := m.Confine
	opts.DataDir, opts.Logger = m.DataDir, m.Logger
	l, err := confine.Prepare(opts)
	var bad *confine.OptionError
	if errors.As(err, &bad) {
		flag := map[string]string{"Network": "--agent-network", "ReadPaths": "--agent-read-path", "WritePaths": "--agent-write-path", "MemoryMax": "--agent-memory-max", "HostPorts": "--agent-host-port"}[bad.Field]
		return fmt.Errorf("%s %s", flag, bad.Msg)
	}
	if err != nil {
		return fmt.Errorf("%w: %v; pass --isolation=off (SPARKLES_ISOLATION=off) to run them unconfined, with the server user's rights", ErrNotConfinable, err)
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
	m.Launcher = l
	return nil
}

// launcher keeps a nil *confine.Launcher from becoming a non-nil interface.
func launcher(l *confine.Launcher) agent.Launcher {
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
			return fmt.Errorf("%w: %v; pass --isolation=off (SPARKLES_ISOLATION=off) to run them unconfined, with the server user's rights", ErrNotConfinable, err)
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
