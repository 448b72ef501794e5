package e2e

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// switchMode switches the agent to the mode its adapter names
// (agentsuite.Modes.Switch) between turns and back: the sandbox lists its
// modes and the one it is in, each PATCH answers the new config and writes
// a sandbox.updated, and a turn in the other mode succeeds.
func (s *scenarioRun) switchMode() {
	t := s.t
	t.Helper()
	to := s.a.modes.Switch
	var sb sandbox.Sandbox
	s.p.mustCall(http.MethodGet, "/v1/sandboxes/"+s.id, nil, http.StatusOK, &sb)
	if to == "" {
		// What it announced says whether its row should name one.
		t.Skipf("the adapter's row names no mode to switch to; its config: %+v", sb.Config)
	}
	if sb.Config == nil || sb.Config.Mode == "" || !sandbox.Has(sb.Config.Modes, to) {
		t.Fatalf("sandbox config %+v: want the current mode and %q among the modes", sb.Config, to)
	}
	from := sb.Config.Mode
	if from == to {
		t.Fatalf("the agent starts in %q, the mode the scenario switches to", to)
	}
	t.Logf("modes %+v, current %s", sb.Config.Modes, from)

	patch := func(mode string) {
		t.Helper()
		after := lastID(s.rec.of("", sandbox.TypeSandboxUpdated))
		var got sandbox.Sandbox
		s.p.mustCall(http.MethodPatch, "/v1/sandboxes/"+s.id, map[string]any{"config": map[string]string{"mode": mode}}, http.StatusOK, &got)
		if got.Config == nil || got.Config.Mode != mode {
			t.Fatalf("PATCH mode %s answered config %+v", mode, got.Config)
		}
		s.p.mustCall(http.MethodGet, "/v1/sandboxes/"+s.id, nil, http.StatusOK, &got)
		if got.Config == nil || got.Config.Mode != mode {
			t.Fatalf("after PATCH mode %s the sandbox has config %+v", mode, got.Config)
		}
		var d sandbox.SandboxUpdated
		mustDecode(t, s.updatedAfter(after), &d)
		if d.Config.Mode != mode || !sandbox.Has(d.Config.Modes, from) {
			t.Errorf("sandbox.updated config %+v, want mode %s with the modes listed", d.Config, mode)
		}
	}
	patch(to)
	turn := s.startTurn("hello")
	s.wantStatus(s.completed(turn), sandbox.TurnSucceeded)
	patch(from)
}

// updatedAfter waits for a sandbox.updated between turns with an id above
// after.
func (s *scenarioRun) updatedAfter(after uint64) frame {
	r := s.rec
	deadline := time.After(scenarioWait)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		for _, f := range r.of("", sandbox.TypeSandboxUpdated) {
			if id, _ := strconv.ParseUint(f.id, 10, 64); id > after {
				return f
			}
		}
		select {
		case <-changed:
		case <-deadline:
			s.t.Fatalf("no sandbox.updated after %d within %s; received: %s", after, scenarioWait, r.summary())
		}
	}
}
