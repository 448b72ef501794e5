package coordinator_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// stoppingLauncher starts agents as they are, and says of each that its
// limits stopped it, as internal/confine says of an agent over its memory.
type stoppingLauncher struct{ why string }

func (l stoppingLauncher) Start(cmd *exec.Cmd, _ string, _ agent.Confinement) (func(), error) {
	return func() {}, cmd.Start()
}

func (l stoppingLauncher) ExitReason(*exec.Cmd) string { return l.why }

// TestAgentStoppedByLimits: an agent its confinement stopped (over its
// memory limit) fails its turn with a sandbox.error that says so, and the
// sandbox's status detail too, rather than "exited unexpectedly".
func TestAgentStoppedByLimits(t *testing.T) {
	const why = "the agent used more than its memory limit of 256 MiB (--agent-memory-max) and was stopped"
	e := newEnv(t, func(c *coordinator.Config) { c.Launcher = stoppingLauncher{why} })
	sb := e.create(sandbox.CreateParams{})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "crash"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	var sbErr *sandbox.SandboxError
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			sbErr = d
		}
	}
	if sbErr == nil || sbErr.Code != sandbox.ErrAgentExited || sbErr.Message != why {
		t.Fatalf("sandbox.error = %+v, want agent_exited saying %q", sbErr, why)
	}
	if c := completed(evs); c.Error == nil || c.Error.Message != why {
		t.Errorf("turn.completed = %+v", c)
	}
	if got := e.waitStatus(sb.ID, sandbox.StatusStopped); got.StatusDetail != why+"; it starts again with the next turn" {
		t.Errorf("status_detail = %q", got.StatusDetail)
	}
}
