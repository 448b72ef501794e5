package app

import (
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// TestLateLauncher: the launcher the coordinator holds while the real one
// is prepared and probed starts nothing until it is settled, then fails
// each start, and answers the agents check, with why confinement failed.
func TestLateLauncher(t *testing.T) {
	late := &lateLauncher{ready: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		_, err := late.Start(exec.Command("/bin/true"), t.TempDir(), agent.Confinement{})
		started <- err
	}()
	select {
	case err := <-started:
		t.Fatalf("Start returned before the launcher was settled: %v", err)
	default:
	}
	why := errors.New("the kernel has no Landlock")
	late.settle(nil, why)
	if err := <-started; !errors.Is(err, why) {
		t.Fatalf("Start: %v, want %v", err, why)
	}
	if _, err := late.Grants([]string{"/bin/true"}); !errors.Is(err, why) {
		t.Errorf("Grants: %v, want %v", err, why)
	}
	if got := late.Isolation(); !strings.Contains(got, why.Error()) {
		t.Errorf("Isolation: %q, want it to say %q", got, why)
	}
	if got := late.ExitReason(exec.Command("/bin/true")); got != "" {
		t.Errorf("ExitReason: %q, want none", got)
	}
}

// TestPlanIsolation: what needs no kernel is settled before the server
// serves, and only a confining server gets a late launcher.
func TestPlanIsolation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m         func() *Main
		late      bool
		isolation string
		err       string
	}{
		{name: "off", m: func() *Main { return &Main{Isolation: "off"} }, isolation: "off"},
		{name: "unknown", m: func() *Main { return &Main{Isolation: "sometimes"} }, err: `--isolation "sometimes": want on or off`},
		{name: "no agents", m: func() *Main { return &Main{} }, isolation: "none needed: no agent processes"},
		{name: "confined", m: func() *Main { return &Main{Agents: registry.Registry{"sh": {Command: "/bin/sh"}}} }, late: true, isolation: isolationChecked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m()
			m.Logger = slog.New(slog.DiscardHandler)
			late, err := m.planIsolation()
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("planIsolation: %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil || (late != nil) != tc.late || m.isolationNow() != tc.isolation {
				t.Fatalf("planIsolation: late %v, %v; isolation %q; want late %v, isolation %q", late != nil, err, m.isolationNow(), tc.late, tc.isolation)
			}
		})
	}
}
