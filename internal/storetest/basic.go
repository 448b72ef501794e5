package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func testCreate(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := openStore(t, open)
		sb := newSandbox("c_1")
		sb.LastEventID = 7 // a new log has no events, whatever the caller says
		if err := s.Create(ctx, sb, []byte(`{"secrets":{"k":"v"}}`)); err != nil {
			t.Fatal(err)
		}
		sb.Metadata["team"] = "changed after Create"

		want := mustJSON(t, newSandbox("c_1"))
		got, err := s.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got := mustJSON(t, got); got != want {
			t.Fatalf("Sandbox = %s, want %s", got, want)
		}
		config, err := s.Config(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(config), `{"secrets":{"k":"v"}}`; got != want {
			t.Fatalf("Config = %s, want %s", got, want)
		}
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got := mustJSON(t, st.Sandbox); got != want {
			t.Fatalf("State.Sandbox = %s, want %s", got, want)
		}
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := head.Status, sandbox.StatusReady; got != want || head.LastEventID != 0 {
			t.Fatalf("Head = %+v, want status %s and no events", head, want)
		}
		if recs := mustRead(t, s, "c_1", 0, 10); len(recs) != 0 {
			t.Fatalf("Read of a new log = %v, want nothing", recordIDs(recs))
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvents(1)...)
		err := s.Create(ctx, newSandbox("c_1"), []byte(`{"other":true}`))
		if got, want := errType(err), sandbox.EConflict; got != want {
			t.Fatalf("second Create: err = %v, want %s", err, want)
		}
		config, err := s.Config(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(config), `{"env":{}}`; got != want {
			t.Fatalf("Config after a refused Create = %s, want %s", got, want)
		}
		if head, _ := s.Head("c_1"); head.LastEventID == 0 {
			t.Fatal("a refused Create reset the log")
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		s := openStore(t, open)
		err := s.Create(ctx, sandbox.Sandbox{}, nil)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("Create without id: err = %v, want %s", err, want)
		}
	})
}

func testNotFound(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	calls := map[string]func() error{
		"Sandbox":                func() error { _, err := s.Sandbox(ctx, "c_2"); return err },
		"Config":                 func() error { _, err := s.Config(ctx, "c_2"); return err },
		"State":                  func() error { _, err := s.State(ctx, "c_2"); return err },
		"Head":                   func() error { _, err := s.Head("c_2"); return err },
		"Read":                   func() error { _, err := s.Read(ctx, "c_2", 0, 10); return err },
		"Append":                 func() error { return s.Append(ctx, "c_2", textEvents(1), nil) },
		"Turn":                   func() error { _, err := s.Turn(ctx, "c_2", "turn_1"); return err },
		"Approval":               func() error { _, err := s.Approval(ctx, "c_2", "appr_1"); return err },
		"TurnOfKnownSandbox":     func() error { _, err := s.Turn(ctx, "c_1", "turn_1"); return err },
		"ApprovalOfKnownSandbox": func() error { _, err := s.Approval(ctx, "c_1", "appr_1"); return err },
		"Drop":                   func() error { return s.Drop(ctx, "c_2") },
		"Prune":                  func() error { _, err := s.Prune(ctx, "c_2", 10, 10); return err },
		"Compact":                func() error { _, err := s.Compact(ctx, "c_2", []uint64{1}); return err },
		"EmptyID":                func() error { _, err := s.Sandbox(ctx, ""); return err },
		"OddID":                  func() error { _, err := s.Sandbox(ctx, "c_1.>"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if got, want := errType(call()), sandbox.ENotFound; got != want {
				t.Fatalf("error type = %q, want %q", got, want)
			}
		})
	}
	t.Run("Wait", func(t *testing.T) {
		if !isClosed(s.Wait("c_2")) {
			t.Fatal("Wait on an unknown sandbox returned an open channel")
		}
	})
}

func testSandboxes(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	// Created out of order: the list follows ids, which for real ids (ULIDs)
	// is creation order.
	for _, id := range []string{"c_03", "c_01", "c_05", "c_02", "c_04"} {
		mustCreate(t, s, id)
	}
	ids := func(list []sandbox.Sandbox) []string {
		var out []string
		for _, sb := range list {
			out = append(out, sb.ID)
		}
		return out
	}
	tests := []struct {
		name  string
		after string
		limit int
		want  []string
		more  bool
	}{
		{"First", "", 2, []string{"c_01", "c_02"}, true},
		{"Middle", "c_02", 2, []string{"c_03", "c_04"}, true},
		{"Last", "c_04", 2, []string{"c_05"}, false},
		{"ExactlyAll", "", 5, []string{"c_01", "c_02", "c_03", "c_04", "c_05"}, false},
		{"AfterUnknownID", "c_025", 2, []string{"c_03", "c_04"}, true},
		{"AfterEnd", "c_05", 2, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, more, err := s.Sandboxes(ctx, tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(list); !slices.Equal(got, tt.want) || more != tt.more {
				t.Fatalf("Sandboxes(%q, %d) = %v, more %v; want %v, more %v", tt.after, tt.limit, got, more, tt.want, tt.more)
			}
		})
	}
	t.Run("Watermarks", func(t *testing.T) {
		got := mustAppend(t, s, "c_02", textEvents(3)...)
		list, _, err := s.Sandboxes(ctx, "c_01", 1)
		if err != nil {
			t.Fatal(err)
		}
		want := sandbox.Marks{OldestEventID: sandbox.Seq(got[0]), LastEventID: sandbox.Seq(got[2])}
		if got := list[0].Marks(); got != want {
			t.Fatalf("listed marks = %+v, want %+v", got, want)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, _, err := s.Sandboxes(ctx, "", 0)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	})
}

func testAppend(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		evs := []*sandbox.Event{textEvent("", "part_1", "a"), textEvent("turn_1", "part_1", "ab")}
		ids := mustAppend(t, s, "c_1", evs...)
		ids = append(ids, mustAppend(t, s, "c_1", textEvent("", "part_1", "abc"))...)
		if ids[0] == 0 || !increasing(ids) {
			t.Fatalf("ids = %v, want nonzero and strictly increasing", ids)
		}
		recs := mustRead(t, s, "c_1", 0, 10)
		if got := recordIDs(recs); !slices.Equal(got, ids) {
			t.Fatalf("read ids = %v, want %v", got, ids)
		}
		for i, text := range []string{"a", "ab", "abc"} {
			ev, err := recs[i].Decode()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ev.Data.(*sandbox.MessageUpdated).Text, text; got != want || ev.ID != recs[i].ID {
				t.Fatalf("record %d: id %d text %q, want id %d text %q", i, ev.ID, got, recs[i].ID, want)
			}
			if got, want := recs[i].Type, sandbox.TypeMessageUpdated; got != want {
				t.Fatalf("record %d: type %q, want %q", i, got, want)
			}
			if ev.SandboxID != "c_1" || !ev.TS.Equal(T0) {
				t.Fatalf("record %d: sandbox %q ts %v, want c_1 at %v", i, ev.SandboxID, ev.TS, T0)
			}
		}
		if ev, _ := recs[1].Decode(); ev.TurnID != "turn_1" {
			t.Fatalf("turn_id = %q, want turn_1", ev.TurnID)
		}
		if got, want := evs[0].SandboxID, "c_1"; got != want {
			t.Fatalf("SandboxID = %q, want %q", got, want)
		}
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := head.LastEventID, ids[2]; got != want {
			t.Fatalf("head last id = %d, want %d", got, want)
		}
	})
	t.Run("Envelope", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		ev := textEvent("", "part_1", "hi <b>")
		id := mustAppend(t, s, "c_1", ev)[0]
		want := `{"id":"` + sandbox.FormatID(id) + `","object":"sandbox.event","version":"v1","type":"message.updated",` +
			`"ts":"2026-08-06T14:00:00.123Z","sandbox_id":"c_1","turn_id":null,` +
			`"data":{"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"hi \u003cb\u003e"}}`
		if got := string(mustRead(t, s, "c_1", 0, 1)[0].JSON); got != want {
			t.Fatalf("record JSON\n got %s\nwant %s", got, want)
		}
	})
	t.Run("Interleaved", func(t *testing.T) {
		// Ids of two logs written in turn: each log's own are increasing.
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		var one, two []uint64
		for range 5 {
			one = append(one, mustAppend(t, s, "c_1", textEvents(2)...)...)
			two = append(two, mustAppend(t, s, "c_2", textEvents(1)...)...)
		}
		for id, ids := range map[string][]uint64{"c_1": one, "c_2": two} {
			if !increasing(ids) {
				t.Fatalf("%s: ids %v not strictly increasing", id, ids)
			}
			if got := recordIDs(readAll(t, s, id)); !slices.Equal(got, ids) {
				t.Fatalf("%s: log %v, want %v", id, got, ids)
			}
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		for name, ev := range map[string]*sandbox.Event{
			"Transient":    {Type: sandbox.TypeSandboxStatus, Data: &sandbox.SandboxStatus{Status: "ready"}},
			"OtherSandbox": {Type: sandbox.TypeSandboxError, SandboxID: "c_2", Data: &sandbox.SandboxError{Code: "internal"}},
			"Nil":          nil,
		} {
			err := s.Append(ctx, "c_1", []*sandbox.Event{textEvent("", "part_1", "x"), ev}, nil)
			if got, want := errType(err), sandbox.EInvalidRequest; got != want {
				t.Fatalf("%s: err = %v, want %s", name, err, want)
			}
		}
		if head, _ := s.Head("c_1"); head.LastEventID != 0 {
			t.Fatalf("rejected appends wrote events: last id %d", head.LastEventID)
		}
	})
	t.Run("ErrCanceled", func(t *testing.T) {
		s := openStore(t, open)
		mustCreate(t, s, "c_1")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Append(cctx, "c_1", textEvents(1), nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if head, _ := s.Head("c_1"); head.LastEventID != 0 {
			t.Fatalf("canceled append wrote events: last id %d", head.LastEventID)
		}
		if recs := mustRead(t, s, "c_1", 0, 10); len(recs) != 0 {
			t.Fatalf("canceled append is readable: %v", recordIDs(recs))
		}
	})
}

func increasing(ids []uint64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

func testRead(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	var ids []uint64
	for i := range 6 {
		ids = append(ids, mustAppend(t, s, "c_1", textEvents(1)...)...)
		if i%2 == 0 {
			mustAppend(t, s, "c_2", textEvents(1)...) // may leave holes in c_1's ids
		}
	}
	last := ids[len(ids)-1]
	t.Run("EveryCursor", func(t *testing.T) {
		for after := uint64(0); after <= last; after++ {
			for _, limit := range []int{1, 2, 10} {
				want := above(ids, after, limit)
				if got := recordIDs(mustRead(t, s, "c_1", after, limit)); !slices.Equal(got, want) {
					t.Fatalf("Read(after %d, limit %d) = %v, want %v", after, limit, got, want)
				}
			}
		}
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		wantCursorErr(t, s, "c_1", last+1, sandbox.ECursorStale,
			sandbox.Marks{OldestEventID: sandbox.Seq(ids[0]), LastEventID: sandbox.Seq(last)})
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, err := s.Read(ctx, "c_1", 0, 0)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	})
}

func testReopen(t *testing.T, open Opener) {
	ctx := context.Background()
	s, reopen := open(t)
	if reopen == nil {
		t.Skip("the store cannot be reopened")
	}
	mustCreate(t, s, "c_1")
	ids := mustAppend(t, s, "c_1", textEvent("", "part_1", "one"), textEvent("", "part_2", "two"))
	ids = append(ids, mustAppend(t, s, "c_1", textEvent("", "part_3", "three"))...)
	if _, err := s.Prune(ctx, "c_1", ids[2], 10); err != nil {
		t.Fatal(err)
	}
	before, err := s.State(ctx, "c_1")
	if err != nil {
		t.Fatal(err)
	}

	s = reopen()
	t.Run("State", func(t *testing.T) {
		after, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustJSON(t, after), mustJSON(t, before); got != want {
			t.Fatalf("state after reopen = %s, want %s", got, want)
		}
	})
	t.Run("Head", func(t *testing.T) {
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if head.LastEventID != ids[2] || head.PrunedThrough != ids[2] {
			t.Fatalf("head = %+v, want last and pruned through %d", head, ids[2])
		}
	})
	t.Run("IDsContinue", func(t *testing.T) {
		// Every event was pruned; ids still never go back.
		got := mustAppend(t, s, "c_1", textEvents(2)...)
		if got[0] <= ids[2] || !increasing(got) {
			t.Fatalf("ids after reopen = %v, want increasing and above %d", got, ids[2])
		}
		if read := recordIDs(readAll(t, s, "c_1")); !slices.Equal(read, got) {
			t.Fatalf("read after reopen = %v, want %v", read, got)
		}
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: sandbox.Seq(got[0]), PrunedThrough: sandbox.Seq(ids[2]), LastEventID: sandbox.Seq(got[1])})
	})
	t.Run("Listed", func(t *testing.T) {
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != "c_1" {
			t.Fatalf("listed after reopen: %s", mustJSON(t, list))
		}
	})
}
