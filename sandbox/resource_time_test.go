package sandbox_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestResourceTimes: every timestamp of a resource has exactly three digits
// of milliseconds, as the envelope's ts (docs/events.md), even when the time's own
// fraction ends in zeros.
func TestResourceTimes(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 47, 33, 280_000_000, time.FixedZone("x", 3600))
	done := at.Add(time.Second)
	turn := sandbox.Turn{ID: "turn_1", CreatedAt: at, CompletedAt: &done}
	sb := sandbox.Sandbox{ID: "c_1", CreatedAt: at, UpdatedAt: at.Add(-280 * time.Millisecond), CurrentTurn: &turn}
	b, err := json.Marshal(sb)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"created_at":"2026-12-01T09:47:33.280Z"`, `"updated_at":"2026-12-01T09:47:33.000Z"`, `"completed_at":"2026-12-01T09:47:34.280Z"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back sandbox.Sandbox
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.CreatedAt.Equal(at) || !back.CurrentTurn.CompletedAt.Equal(done) {
		t.Errorf("read back %v / %v, want %v / %v", back.CreatedAt, back.CurrentTurn.CompletedAt, at, done)
	}
	b, _ = json.Marshal(sandbox.Turn{ID: "turn_2", CreatedAt: at})
	if !strings.Contains(string(b), `"completed_at":null`) {
		t.Errorf("an open turn: %s, want completed_at null", b)
	}
}
