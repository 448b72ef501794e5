package boltstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestStateFold(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	const turn = "turn_1"
	at := func(d time.Duration) time.Time { return testNow.Add(d) }
	state := func(t *testing.T) sandbox.State {
		t.Helper()
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	queued := sandbox.Turn{
		ID: turn, Object: "turn", SandboxID: "c_1", Status: sandbox.TurnQueued,
		Input: sandbox.TextInput("hi"), CreatedAt: at(0),
	}

	t.Run("QueuedTurn", func(t *testing.T) {
		// A turn exists before its turn.started when the coordinator queues
		// it in the state; it is addressable by id from then on.
		err := s.Append(ctx, "c_1", nil, func(st *sandbox.State) error {
			st.Sandbox.CurrentTurn = (&queued).Clone()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Turn(ctx, "c_1", turn)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.TurnQueued {
			t.Fatalf("turn status = %q, want queued", got.Status)
		}
	})
	t.Run("TurnStarted", func(t *testing.T) {
		mustAppend(t, s, "c_1", &sandbox.Event{
			Type: sandbox.TypeTurnStarted, TurnID: turn, TS: at(time.Second),
			Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")},
		})
		st := state(t)
		if st.Turn == nil || st.Turn.Status != sandbox.TurnRunning || st.Sandbox.CurrentTurn == nil {
			t.Fatalf("state = %s, want a running current turn", mustJSON(t, st))
		}
		if got, want := st.Turn.CreatedAt, at(0); !got.Equal(want) {
			t.Fatalf("turn created_at = %v, want the queued time %v", got, want)
		}
		got, err := s.Turn(ctx, "c_1", turn)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.TurnRunning {
			t.Fatalf("turn status = %q, want running", got.Status)
		}
	})
	t.Run("PartsUpsert", func(t *testing.T) {
		mustAppend(t, s, "c_1", textEvent(turn, "part_1", "Hel"), textEvent(turn, "part_1", "Hello"))
		mustAppend(t, s, "c_1", &sandbox.Event{
			Type: sandbox.TypeMessageUpdated, TurnID: turn,
			Data: sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_2", Index: 1, Kind: sandbox.PartReasoning, Text: "hmm"},
		})
		st := state(t)
		if got, want := len(st.Messages), 2; got != want {
			t.Fatalf("parts = %d, want %d: %s", got, want, mustJSON(t, st.Messages))
		}
		if got, want := st.Messages[0].Text, "Hello"; got != want {
			t.Fatalf("part_1 = %q, want %q", got, want)
		}
		// A payload passed by value folds like one passed by pointer.
		if got, want := st.Messages[1].Kind, sandbox.PartReasoning; got != want {
			t.Fatalf("part_2 kind = %q, want %q", got, want)
		}
	})
	t.Run("ToolsUpsert", func(t *testing.T) {
		line := 3
		tool := &sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read a.go", Kind: sandbox.ToolKindRead, Status: sandbox.ToolPending,
			Locations: []sandbox.Location{{Path: "a.go", Line: &line}}}
		mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: tool})
		tool.Status = sandbox.ToolCompleted
		mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: tool})
		tool.Locations[0].Path = "changed by the caller afterwards"
		st := state(t)
		if len(st.Tools) != 1 || st.Tools[0].Status != sandbox.ToolCompleted || st.Tools[0].Locations[0].Path != "a.go" {
			t.Fatalf("tools = %s, want one completed tool on a.go", mustJSON(t, st.Tools))
		}
	})
	t.Run("ApprovalPending", func(t *testing.T) {
		mustAppend(t, s, "c_1", &sandbox.Event{
			Type: sandbox.TypeApprovalRequested, TurnID: turn,
			Data: &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_1", Title: "Run tests", Kind: sandbox.ToolKindExecute,
				Options: []sandbox.Option{{OptionID: "allow", Kind: sandbox.OptionAllowOnce, Label: "Allow"}}, ExpiresAt: at(time.Hour)},
		})
		if st := state(t); len(st.Approvals) != 1 || st.Approvals[0].ApprovalID != "appr_1" {
			t.Fatalf("approvals = %s, want appr_1 pending", mustJSON(t, st.Approvals))
		}
		a, err := s.Approval(ctx, "c_1", "appr_1")
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != sandbox.ApprovalPending || a.TurnID != turn || a.Decision != nil {
			t.Fatalf("approval = %s, want pending in %s", mustJSON(t, a), turn)
		}
	})
	t.Run("ApprovalResolved", func(t *testing.T) {
		mustAppend(t, s, "c_1", &sandbox.Event{
			Type: sandbox.TypeApprovalResolved, TurnID: turn,
			Data: &sandbox.ApprovalResolved{ApprovalID: "appr_1", Decision: sandbox.DecisionApproved, OptionID: "allow", Reason: sandbox.ReasonUser},
		})
		if st := state(t); len(st.Approvals) != 0 {
			t.Fatalf("approvals = %s, want none pending", mustJSON(t, st.Approvals))
		}
		a, err := s.Approval(ctx, "c_1", "appr_1")
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != sandbox.ApprovalDone || a.Decision == nil || *a.Decision != sandbox.DecisionApproved || a.OptionID == nil || *a.OptionID != "allow" {
			t.Fatalf("approval = %s, want resolved approved with option allow", mustJSON(t, a))
		}
	})
	t.Run("TurnCompleted", func(t *testing.T) {
		mustAppend(t, s, "c_1",
			&sandbox.Event{Type: sandbox.TypeMessageCompleted, TurnID: turn, Data: &sandbox.MessageCompleted{
				MessageID: "msg_1", Parts: []sandbox.Part{{PartID: "part_1", Kind: sandbox.PartText, Text: "Hello!"}}, Text: "Hello!"}},
			&sandbox.Event{Type: sandbox.TypeTurnCompleted, TurnID: turn, TS: at(2 * time.Second), Data: &sandbox.TurnCompleted{
				Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn, DurationMS: 1000}},
		)
		st := state(t)
		if st.Sandbox.CurrentTurn != nil || st.Turn == nil || st.Turn.Status != sandbox.TurnSucceeded || st.Messages[0].Text != "Hello!" {
			t.Fatalf("state = %s, want the turn succeeded and no current turn", mustJSON(t, st))
		}
		got, err := s.Turn(ctx, "c_1", turn)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.TurnSucceeded || got.StopReason == nil || *got.StopReason != sandbox.StopEndTurn || got.CompletedAt == nil {
			t.Fatalf("turn = %s, want succeeded at end_turn", mustJSON(t, got))
		}
	})
	t.Run("MatchesLogFold", func(t *testing.T) {
		// A client that folds the log from a snapshot taken while the turn
		// was queued reaches the same state.
		fold := sandbox.State{Sandbox: newSandbox("c_1")}
		fold.Sandbox.CurrentTurn = (&queued).Clone()
		for _, rec := range mustRead(t, s, "c_1", 0, 1000) {
			ev, err := rec.Decode()
			if err != nil {
				t.Fatal(err)
			}
			fold.Apply(&ev)
		}
		st := state(t)
		if got, want := mustJSON(t, st), mustJSON(t, fold); got != want {
			t.Fatalf("state\n got %s\nwant %s", got, want)
		}
	})
	t.Run("Copy", func(t *testing.T) {
		st := state(t)
		st.Messages[0].Text = "changed"
		st.Turn.Input[0].Text = "changed"
		st.Sandbox.Metadata["team"] = "changed"
		again := state(t)
		if again.Messages[0].Text != "Hello!" || again.Turn.Input[0].Text != "hi" || again.Sandbox.Metadata["team"] != "a" {
			t.Fatalf("a caller changed the store's state: %s", mustJSON(t, again))
		}
		sb, err := s.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		sb.Metadata["team"] = "changed"
		if again := state(t); again.Sandbox.Metadata["team"] != "a" {
			t.Fatal("a caller changed the store's sandbox through Sandbox")
		}
	})
	t.Run("MetaMatchesState", func(t *testing.T) {
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		st := state(t)
		if got, want := mustJSON(t, list[0]), mustJSON(t, st.Sandbox); got != want {
			t.Fatalf("listed sandbox\n got %s\nwant %s", got, want)
		}
		if got, want := st.Sandbox.LastEventID, sandbox.Seq(10); got != want {
			t.Fatalf("last_event_id = %d, want %d", got, want)
		}
		if got := recordIDs(mustRead(t, s, "c_1", 0, 100)); !slices.Equal(got, seq(1, 10)) {
			t.Fatalf("log = %v, want 1..10", got)
		}
	})
}
