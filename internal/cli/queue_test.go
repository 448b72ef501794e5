package cli

import (
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestSummaryTurnQueued: a queued turn reads as its place, its prompt and
// its id, which sparkles cancel takes whole.
func TestSummaryTurnQueued(t *testing.T) {
	ev := sandbox.Event{Type: sandbox.TypeTurnQueued, TurnID: "turn_2",
		Data: &sandbox.TurnQueuedData{Input: sandbox.TextInput("run the tests"), Position: 2}}
	if got, want := summary(ev, 200), "#2 run the tests turn_2"; got != want {
		t.Fatalf("summary = %q, want %q", got, want)
	}
}
