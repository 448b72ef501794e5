package sparklestest_test

import (
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestHTTPTurnUsage: the demo agent's usage_update reaches a reader as
// turn.usage while the turn runs, a snapshot taken then shows it on its
// turn, as does the sandbox's current turn, and turn.completed
// carries the last figures with the prompt answer's token counts, which
// the turn resource then shows.
func TestHTTPTurnUsage(t *testing.T) {
	r := newRun(t)
	turn, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "usage, then hang")
	if err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeTurnUsage))
	live := find[sandbox.TurnUsage](evs)
	if live.Usage.ContextTokens == 0 || live.Usage.ContextWindow == 0 || live.Usage.Cost == nil || live.Usage.Cost.Currency != "USD" || live.Usage.Cost.Amount <= 0 {
		t.Fatalf("turn.usage %+v, want context tokens, window and a cost in USD", live.Usage)
	}
	// The agent hangs after its first report, so this is the last.
	r.until(of(sandbox.TypeMessageUpdated))

	st := r.srv.Client.Stream(r.ctx, r.sb.ID, client.StreamOptions{})
	defer st.Close()
	m, err := st.Next(r.ctx)
	if err != nil || m.Kind != client.KindSnapshot {
		t.Fatalf("first frame %v, %v: want the snapshot", m.Kind, err)
	}
	snap := m.Event.Data.(*sandbox.Snapshot)
	if snap.Turn == nil || snap.Turn.ID != turn.ID || snap.Turn.Usage == nil || *snap.Turn.Usage.Cost != *live.Usage.Cost || snap.Turn.Usage.ContextTokens != live.Usage.ContextTokens {
		t.Fatalf("snapshot turn %+v, want turn %s with usage %+v", snap.Turn, turn.ID, live.Usage)
	}
	sb, err := r.srv.Client.GetSandbox(r.ctx, r.sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := sb.CurrentTurn; c == nil || c.Usage == nil || c.Usage.ContextTokens != live.Usage.ContextTokens {
		t.Fatalf("current turn %+v, want usage %+v", c, live.Usage)
	}
	running, err := r.srv.Client.GetTurn(r.ctx, r.sb.ID, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if running.Status != sandbox.TurnRunning || running.Usage == nil || running.Usage.ContextTokens != live.Usage.ContextTokens {
		t.Fatalf("GET of the running turn: %s with usage %+v, want running with %+v", running.Status, running.Usage, live.Usage)
	}

	if _, err := r.srv.Client.CancelTurn(r.ctx, r.sb.ID, turn.ID); err != nil {
		t.Fatal(err)
	}
	done := find[sandbox.TurnCompleted](r.until(of(sandbox.TypeTurnCompleted)))
	if u := done.Usage; u == nil || u.ContextTokens != live.Usage.ContextTokens || u.Cost == nil || *u.Cost != *live.Usage.Cost || u.TotalTokens == 0 {
		t.Fatalf("turn.completed usage %+v, want the last turn.usage's figures and the answer's tokens", u)
	}
	got, err := r.srv.Client.GetTurn(r.ctx, r.sb.ID, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage == nil || *got.Usage.Cost != *done.Usage.Cost || got.Usage.TotalTokens != done.Usage.TotalTokens {
		t.Fatalf("GET turn usage %+v, want turn.completed's %+v", got.Usage, done.Usage)
	}
}
