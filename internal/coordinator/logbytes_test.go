package coordinator_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/floodagent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestLogBytes runs an agent that floods its turns with tool calls of 100
// locations of 4 KiB each against a log bound of 4 MiB.
func TestLogBytes(t *testing.T) {
	const bound = 4 << 20
	var mu sync.Mutex
	over := map[string]int{}
	told := make(chan struct{}, 16)
	e := newEnv(t, func(c *coordinator.Config) {
		c.Builtins = map[string]coordinator.BuiltinAgent{"flood": floodagent.Run}
		c.LogMaxBytes = bound
		c.LogOver = func(id string) {
			mu.Lock()
			over[id]++
			mu.Unlock()
			told <- struct{}{}
		}
	})
	overs := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return over[id]
	}
	sb := e.create(sandbox.CreateParams{Agent: "flood"})
	logBytes := func() (log, turn uint64) {
		t.Helper()
		log, turn, err := e.store.LogBytes(sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return log, turn
	}

	t.Run("FinishedTurnsRun", func(t *testing.T) {
		// Three turns of about 1.6 MiB: each within the bound, together
		// past it. None fails; retention is told once the log is past it.
		for range 3 {
			evs := e.turnOf(sb, "tools 4 4096")
			if c := completed(evs); c == nil || c.Status != sandbox.TurnSucceeded {
				t.Fatalf("turn.completed = %+v, want succeeded; events %s", c, types(evs))
			}
		}
		if log, _ := logBytes(); log <= bound {
			t.Fatalf("the log holds %d bytes, want past the bound %d for this test", log, bound)
		}
		// The step that crossed the bound may be the turn's last, whose
		// events reach the log before the box looks at its size.
		select {
		case <-told:
		case <-time.After(10 * time.Second):
			t.Fatal("retention was not told of a log past its bound")
		}
		if got := overs(sb.ID); got != 1 {
			t.Fatalf("retention told %d times of a log past its bound, want once, in the turn that passed it", got)
		}
	})
	t.Run("TurnPastTheBoundFails", func(t *testing.T) {
		evs := e.turnOf(sb, "tools 0 4096")
		wantFailed(t, evs, sandbox.ErrLogFull, sandbox.ErrLogFull)
		msg := sandboxError(evs).Message
		for _, want := range []string{"4 MiB", "--retention-max-bytes"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("sandbox.error message %q does not name %q", msg, want)
			}
		}
		// The turn's end reached the log, and the turn passed the bound by
		// at most one append (maxUpdateBytes of updates, and the event
		// that crossed it), plus its end.
		_, turn := logBytes()
		if slack := uint64(2 << 20); turn <= bound || turn > bound+slack {
			t.Fatalf("the turn wrote %d bytes, want past the bound %d by at most %d", turn, bound, slack)
		}
		if got := e.waitStatus(sb.ID, sandbox.StatusStopped).StatusDetail; !strings.Contains(got, "byte bound") {
			t.Fatalf("status detail %q", got)
		}
		if got := overs(sb.ID); got < 2 {
			t.Fatalf("retention told %d times, want again for the stopped turn", got)
		}
	})
	t.Run("NextTurn", func(t *testing.T) {
		// The agent boots again for the next turn, which counts afresh.
		evs := e.turnOf(sb, "tools 2 100")
		if c := completed(evs); c == nil || c.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn.completed = %+v, want succeeded; events %s", c, types(evs))
		}
		if _, turn := logBytes(); turn > 64<<10 {
			t.Fatalf("a small turn counts %d bytes", turn)
		}
	})
}

// TestLogBytesUnbounded: without a bound (LogMaxBytes 0) a large turn runs
// to its end, and the store still counts it.
func TestLogBytesUnbounded(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) {
		c.Builtins = map[string]coordinator.BuiltinAgent{"flood": floodagent.Run}
	})
	sb := e.create(sandbox.CreateParams{Agent: "flood"})
	evs := e.turnOf(sb, "tools 12 4096")
	if c := completed(evs); c == nil || c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn.completed = %+v, want succeeded; events %s", c, types(evs))
	}
	if _, turn, err := e.store.LogBytes(sb.ID); err != nil || turn < 12*floodagent.Locations*4000 {
		t.Fatalf("turn bytes = %d, %v; want the whole turn counted", turn, err)
	}
}
