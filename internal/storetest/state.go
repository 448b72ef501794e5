package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func testStateFold(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	const turn = "turn_1"
	at := func(d time.Duration) time.Time { return T0.Add(d) }
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
	var ids []uint64
	add := func(t *testing.T, evs ...*sandbox.Event) {
		t.Helper()
		ids = append(ids, mustAppend(t, s, "c_1", evs...)...)
	}

	t.Run("QueuedTurn", func(t *testing.T) {
		// A turn exists before its turn.started when the coordinator queues
		// it in the state; it is addressable by id from then on.
		err := s.Append(ctx, "c_1", nil, func(st *sandbox.State) error {
			q := queued
			st.Sandbox.CurrentTurn = &q
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
		add(t, &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, TS: at(time.Second),
			Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}})
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
		add(t, textEvent(turn, "part_1", "Hel"), textEvent(turn, "part_1", "Hello"))
		add(t, &sandbox.Event{Type: sandbox.TypeMessageUpdated, TurnID: turn, TS: at(time.Second),
			Data: sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_2", Index: 1, Kind: sandbox.PartReasoning, Text: "hmm"}})
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
		add(t, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, TS: T0, Data: tool})
		tool.Status = sandbox.ToolCompleted
		add(t, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, TS: T0, Data: tool})
		tool.Locations[0].Path = "changed by the caller afterwards"
		st := state(t)
		if len(st.Tools) != 1 || st.Tools[0].Status != sandbox.ToolCompleted || st.Tools[0].Locations[0].Path != "a.go" {
			t.Fatalf("tools = %s, want one completed tool on a.go", mustJSON(t, st.Tools))
		}
	})
	t.Run("ApprovalPending", func(t *testing.T) {
		add(t, &sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: turn, TS: T0,
			Data: &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_1", Title: "Run tests", Kind: sandbox.ToolKindExecute,
				Options: []sandbox.Option{{OptionID: "allow", Kind: sandbox.OptionAllowOnce, Label: "Allow"}}, ExpiresAt: at(time.Hour)}})
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
		add(t, &sandbox.Event{Type: sandbox.TypeApprovalResolved, TurnID: turn, TS: T0,
			Data: &sandbox.ApprovalResolved{ApprovalID: "appr_1", Decision: sandbox.DecisionApproved, OptionID: "allow", Reason: sandbox.ReasonUser}})
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
		add(t,
			&sandbox.Event{Type: sandbox.TypeMessageCompleted, TurnID: turn, TS: at(2 * time.Second), Data: &sandbox.MessageCompleted{
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
		q := queued
		fold.Sandbox.CurrentTurn = &q
		for _, rec := range readAll(t, s, "c_1") {
			ev, err := rec.Decode()
			if err != nil {
				t.Fatal(err)
			}
			fold.Appended(rec.Type, len(rec.JSON))
			fold.Apply(&ev)
		}
		if got, want := mustJSON(t, state(t)), mustJSON(t, fold); got != want {
			t.Fatalf("state\n got %s\nwant %s", got, want)
		}
		if got := recordIDs(readAll(t, s, "c_1")); !slices.Equal(got, ids) {
			t.Fatalf("log = %v, want %v", got, ids)
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
		if again, _ := s.Sandbox(ctx, "c_1"); again.Metadata["team"] != "a" {
			t.Fatal("a caller changed the store's sandbox through Sandbox")
		}
	})
	t.Run("ListedMatchesState", func(t *testing.T) {
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustJSON(t, list[0]), mustJSON(t, state(t).Sandbox); got != want {
			t.Fatalf("listed sandbox\n got %s\nwant %s", got, want)
		}
	})
}

func testMutate(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("AgentSessionKept", func(t *testing.T) {
		// The coordinator writes the agent's session once, with a mutate;
		// every later append, with or without one, and a reopen must keep
		// it, and no snapshot may show it.
		s, reopen := open(t)
		mustCreate(t, s, "c_1")
		err := s.Append(ctx, "c_1", nil, func(st *sandbox.State) error {
			st.AgentSession = "agent-session-7"
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, "c_1", textEvents(3)...)
		err = s.Append(ctx, "c_1", textEvents(1), func(st *sandbox.State) error {
			st.Sandbox.StatusDetail = "still here"
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := func(s Store, when string) {
			t.Helper()
			st, err := s.State(ctx, "c_1")
			if err != nil {
				t.Fatal(err)
			}
			if got := st.AgentSession; got != "agent-session-7" {
				t.Fatalf("%s: agent session %q, want agent-session-7", when, got)
			}
			if snap := mustJSON(t, st.Snapshot()); strings.Contains(snap, "agent-session-7") {
				t.Fatalf("%s: the snapshot shows the agent's session: %s", when, snap)
			}
		}
		want(s, "after appends")
		if reopen != nil {
			want(reopen(), "after reopen")
		}
	})
	t.Run("OK", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		err := s.Append(ctx, "c_1", nil, func(st *sandbox.State) error {
			st.Sandbox.Status, st.Sandbox.StatusDetail = sandbox.StatusStopping, "shutting down"
			st.Sandbox.LastEventID = 99 // watermarks belong to the log
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if head.Status != sandbox.StatusStopping || head.Detail != "shutting down" || head.LastEventID != 0 {
			t.Fatalf("head = %+v, want stopping, shutting down, last 0", head)
		}
		if st, _ := s.State(ctx, "c_1"); st.Sandbox.Status != sandbox.StatusStopping || st.Sandbox.LastEventID != 0 {
			t.Fatalf("state = %s, want stopping with last 0", mustJSON(t, st))
		}
	})
	t.Run("BeforeEvents", func(t *testing.T) {
		// mutate sees the state before the append's own events.
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		first := mustAppend(t, s, "c_1", textEvents(1)...)
		var seen sandbox.Seq
		evs := textEvents(2)
		err := s.Append(ctx, "c_1", evs, func(st *sandbox.State) error {
			seen = st.Sandbox.LastEventID
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := seen, sandbox.Seq(first[0]); got != want {
			t.Fatalf("mutate saw last id %d, want %d", got, want)
		}
	})
	t.Run("ErrFailsOnlyItsCaller", func(t *testing.T) {
		// Failing and succeeding appends race on two sandboxes: every
		// success is in the log, nothing of a failure is, in the log or the
		// state.
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		errMutate := errors.New("turn in progress")
		const rounds = 10
		var wg sync.WaitGroup
		var mu sync.Mutex
		good := map[string][]uint64{}
		errs := make(chan error, 4*rounds)
		for _, id := range []string{"c_1", "c_2"} {
			for range 2 {
				wg.Go(func() {
					for i := range rounds {
						evs := []*sandbox.Event{textEvent("", "part_ok", fmt.Sprint("ok ", i))}
						if err := s.Append(ctx, id, evs, nil); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						good[id] = append(good[id], evs[0].ID)
						mu.Unlock()
					}
				})
				wg.Go(func() {
					for range rounds {
						evs := []*sandbox.Event{textEvent("", "part_bad", "bad"), textEvent("", "part_bad", "worse")}
						err := s.Append(ctx, id, evs, func(st *sandbox.State) error {
							st.Sandbox.Status = sandbox.StatusFailed // must be discarded
							st.Messages = append(st.Messages, sandbox.MessageUpdated{PartID: "part_x"})
							return errMutate
						})
						if !errors.Is(err, errMutate) {
							errs <- fmt.Errorf("failing mutate: err = %v, want %v", err, errMutate)
							return
						}
						if evs[0].ID != 0 || evs[1].ID != 0 {
							errs <- fmt.Errorf("failed append was assigned ids %d, %d", evs[0].ID, evs[1].ID)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, id := range []string{"c_1", "c_2"} {
			want := good[id]
			slices.Sort(want)
			if got := recordIDs(readAll(t, s, id)); !slices.Equal(got, want) {
				t.Fatalf("%s: log = %v, want the successful appends %v", id, got, want)
			}
			st, err := s.State(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.Sandbox.Status != sandbox.StatusReady || len(st.Messages) != 1 || st.Messages[0].PartID != "part_ok" ||
				st.Sandbox.LastEventID != sandbox.Seq(want[len(want)-1]) {
				t.Fatalf("%s: state = %s, want ready with only part_ok, last id %d", id, mustJSON(t, st), want[len(want)-1])
			}
		}
	})
	t.Run("ErrPanic", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		err := s.Append(ctx, "c_1", textEvents(1), func(*sandbox.State) error { panic("bug") })
		if err == nil {
			t.Fatal("append with a panicking mutate succeeded")
		}
		if recs := mustRead(t, s, "c_1", 0, 10); len(recs) != 0 {
			t.Fatalf("a panicking append wrote %v", recordIDs(recs))
		}
		if got := mustAppend(t, s, "c_1", textEvents(1)...); got[0] == 0 {
			t.Fatal("no append after a panic")
		}
	})
}
