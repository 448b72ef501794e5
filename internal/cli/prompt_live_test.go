package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/vtscreen"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// clockRenderer is a live renderer whose turn began at a clock the test
// moves.
func clockRenderer(vt *vtscreen.Screen) (*renderer, *time.Time) {
	r := liveRenderer(vt)
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	r.status.start = now
	r.status.now = func() time.Time { return now }
	return r, &now
}

// TestRendererStatus: while a turn runs, the bottom line of a terminal
// turns a spinner and says how long the turn has run, and what tool is
// running.
func TestRendererStatus(t *testing.T) {
	vt := vtscreen.New(60)
	r, now := clockRenderer(vt)
	r.setWaiting("waiting for the agent…")
	wantScreen(t, vt, "⠋ waiting for the agent… · 0s")
	*now = now.Add(12*time.Second + 400*time.Millisecond)
	r.tick()
	wantScreen(t, vt, "⠙ waiting for the agent… · 12s")
	r.setWaiting("working…")
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Run make", Kind: "execute", Status: sandbox.ToolRunning})
	*now = now.Add(65 * time.Second)
	r.tick()
	wantScreen(t, vt, "⠹ Run make · running · 1m17s")
	r.tool(&sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Run make", Kind: "execute", Status: sandbox.ToolCompleted})
	wantScreen(t, vt, "✓ Run make\n⠹ working… · 1m17s")
	r.finish()
	r.turnSummary(&sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, DurationMS: 77000}, 0, "")
	// Deleted with --rm: nothing to continue.
	wantScreen(t, vt, "✓ Run make\n✓ succeeded in 1m17s")
}

// TestRendererStatusBelowText: after text that stops mid-line (an agent
// that works, or hangs, after its first words), the status comes on a
// line of its own below it, and goes when the text goes on, from where it
// was.
func TestRendererStatusBelowText(t *testing.T) {
	vt := vtscreen.New(20)
	r, now := clockRenderer(vt)
	r.setWaiting("working…")
	r.part(upd("part_1", sandbox.PartText, "Let me look"))
	wantScreen(t, vt, "Let me look")
	// Text that streams shows progress by itself: the first tick after it
	// draws nothing.
	r.tick()
	wantScreen(t, vt, "Let me look")
	*now = now.Add(3 * time.Second)
	r.tick()
	wantScreen(t, vt, "Let me look\n⠙ working… · 3s")
	r.tick()
	wantScreen(t, vt, "Let me look\n⠹ working… · 3s")
	// Wrapped past the width: back to the column on the row it ends on.
	r.part(upd("part_1", sandbox.PartText, "Let me look at the code, then"))
	r.tick()
	r.tick()
	wantScreen(t, vt, "Let me look at the c\node, then\n⠸ working… · 3s")
	r.part(upd("part_1", sandbox.PartText, "Let me look at the code, then fix it."))
	wantScreen(t, vt, "Let me look at the c\node, then fix it.")
	r.tick()
	r.tick()
	r.completed(&sandbox.MessageCompleted{Parts: []sandbox.Part{{PartID: "part_1", Kind: sandbox.PartText, Text: "Let me look at the code, then fix it."}}})
	wantScreen(t, vt, "Let me look at the c\node, then fix it.\n⠼ working… · 3s")
	r.finish()
	wantScreen(t, vt, "Let me look at the c\node, then fix it.")

	for _, tt := range []struct{ name, text string }{
		// The terminal decides how wide these are: no column to go back to.
		{"Wide", "看一下"},
		{"Emoji", "Done ✅"},
		{"Combining", "cafe\u0301"},
		// The cursor waits past the last column.
		{"FullRow", strings.Repeat("x", 20)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vt := vtscreen.New(20)
			r, _ := clockRenderer(vt)
			r.setWaiting("working…")
			r.part(upd("part_1", sandbox.PartText, tt.text))
			r.tick()
			r.tick()
			if got := vt.String(); strings.Contains(got, "working") {
				t.Fatalf("status drawn below %q:\n%s", tt.text, got)
			}
		})
	}
	t.Run("NewLineAfter", func(t *testing.T) {
		// Text of the line after a wide one is back in known columns.
		vt := vtscreen.New(20)
		r, _ := clockRenderer(vt)
		r.setWaiting("working…")
		r.part(upd("part_1", sandbox.PartText, "看一下\nok"))
		r.tick()
		r.tick()
		if got, want := vt.String(), "看一下\nok\n⠙ working… · 0s"; got != want {
			t.Fatalf("screen:\n%s\nwant:\n%s", got, want)
		}
	})
}

// TestRendererStatusPipe: what is not a terminal that moves the cursor
// gets no spinner, however often the clock ticks.
func TestRendererStatusPipe(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var out bytes.Buffer
		r := newRenderer(&out, &out, false)
		r.tty, r.fd = tty, -1 // a dumb terminal when tty
		r.status.start = time.Now()
		r.setWaiting("waiting for the agent…")
		r.part(upd("part_1", sandbox.PartText, "Let me look"))
		for range 3 {
			r.tick()
		}
		r.finish()
		if got := out.String(); strings.Contains(got, "\x1b") || strings.ContainsAny(got, strings.Join(spinner, "")) || strings.Contains(got, "waiting") {
			t.Fatalf("tty=%v: a spinner where the cursor does not move: %q", tty, got)
		}
	}
}
