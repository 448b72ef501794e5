package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/vtscreen"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A turn the server canceled by stopping says so, on a terminal and on a
// pipe, and exits 2 as any cancel does; a cancel of the user's own stays
// a plain "canceled".
func TestTurnStoppedByServer(t *testing.T) {
	stopped := &sandbox.TurnCompleted{
		Status: sandbox.TurnCanceled, StopReason: sandbox.StopCanceled, DurationMS: 2700,
		Error: &sandbox.ErrorInfo{Code: sandbox.ErrServerStopped, Message: "the server stopped during the turn; send the prompt again to go on"},
	}
	byUser := &sandbox.TurnCompleted{Status: sandbox.TurnCanceled, StopReason: sandbox.StopCanceled, DurationMS: 2700}
	next := `sparkles prompt --sandbox c_1 "…"`

	t.Run("Terminal", func(t *testing.T) {
		for _, tc := range []struct {
			d    *sandbox.TurnCompleted
			want string
		}{
			{stopped, "⊘ canceled after 2.7s: the server stopped during the turn\n  continue: " + next},
			{byUser, "⊘ canceled after 2.7s\n  continue: " + next},
		} {
			vt := vtscreen.New(80)
			r := liveRenderer(vt)
			r.turnSummary(tc.d, 0, next)
			wantScreen(t, vt, tc.want)
			if got := turnExit(tc.d, 0); got != exitTurnCanceled {
				t.Fatalf("exit %v, want %v", got, exitTurnCanceled)
			}
		}
	})
	t.Run("Pipe", func(t *testing.T) {
		for _, tc := range []struct {
			d    *sandbox.TurnCompleted
			want string
		}{
			{stopped, "sparkles: turn canceled: the server stopped during the turn\n"},
			{byUser, "sparkles: turn canceled\n"},
		} {
			var out, errw bytes.Buffer
			p := &promptRun{r: newRenderer(&out, &errw, false), errw: &errw}
			done, err := p.handle(client.Message{Kind: client.KindEvent, Event: sandbox.Event{Type: sandbox.TypeTurnCompleted, Data: tc.d}})
			if !done || err != exitTurnCanceled {
				t.Fatalf("handle = %v, %v; want done, exit %v", done, err, exitTurnCanceled)
			}
			if got := errw.String(); !strings.HasSuffix(got, tc.want) {
				t.Fatalf("stderr = %q, want it to end %q", got, tc.want)
			}
		}
	})
}
