package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func testWait(t *testing.T, open Opener) {
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	t.Run("Append", func(t *testing.T) {
		ch, other := s.Wait("c_1"), s.Wait("c_2")
		if isClosed(ch) {
			t.Fatal("wait channel closed before any change")
		}
		if recs := mustRead(t, s, "c_1", 0, 10); len(recs) != 0 {
			t.Fatalf("read = %v, want nothing yet", recordIDs(recs))
		}
		ids := mustAppend(t, s, "c_1", textEvents(1)...)
		waitClosed(t, ch, "append")
		if got := recordIDs(mustRead(t, s, "c_1", 0, 10)); !slices.Equal(got, ids) {
			t.Fatalf("read after the wake-up = %v, want %v", got, ids)
		}
		if isClosed(other) {
			t.Fatal("an append to c_1 woke the waiters of c_2")
		}
		if isClosed(s.Wait("c_1")) {
			t.Fatal("Wait after a wake-up returned a closed channel")
		}
	})
	t.Run("Mutate", func(t *testing.T) {
		ch := s.Wait("c_1")
		err := s.Append(context.Background(), "c_1", nil, func(st *sandbox.State) error {
			st.Sandbox.Status = sandbox.StatusStopped
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, ch, "state change")
	})
	t.Run("Prune", func(t *testing.T) {
		head, _ := s.Head("c_1")
		ch := s.Wait("c_1")
		if _, err := s.Prune(context.Background(), "c_1", head.LastEventID, 10); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, ch, "prune")
	})
	t.Run("Drop", func(t *testing.T) {
		ch := s.Wait("c_2")
		if err := s.Drop(context.Background(), "c_2"); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, ch, "drop")
		if !isClosed(s.Wait("c_2")) {
			t.Fatal("Wait on a dropped sandbox returned an open channel")
		}
	})
}

func testPrune(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	var ids []uint64
	for i := range 10 {
		ids = append(ids, mustAppend(t, s, "c_1", textEvents(1)...)...)
		if i%3 == 0 {
			mustAppend(t, s, "c_2", textEvents(1)...)
		}
	}
	seq := func(id uint64) sandbox.Seq { return sandbox.Seq(id) }
	last := seq(ids[9])

	t.Run("OK", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", ids[3], 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := removed, 4; got != want {
			t.Fatalf("removed = %d, want %d", got, want)
		}
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: seq(ids[4]), PrunedThrough: seq(ids[3]), LastEventID: last})
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[4:]; !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
		if got, want := recordIDs(mustRead(t, s, "c_1", ids[3], 100)), ids[4:]; !slices.Equal(got, want) {
			t.Fatalf("Read(%d) = %v, want %v", ids[3], got, want)
		}
	})
	t.Run("ErrCursorPruned", func(t *testing.T) {
		wantCursorErr(t, s, "c_1", ids[3]-1, sandbox.ECursorPruned,
			sandbox.Marks{OldestEventID: seq(ids[4]), PrunedThrough: seq(ids[3]), LastEventID: last})
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		wantCursorErr(t, s, "c_1", ids[9]+1, sandbox.ECursorStale,
			sandbox.Marks{OldestEventID: seq(ids[4]), PrunedThrough: seq(ids[3]), LastEventID: last})
	})
	t.Run("OtherLogUntouched", func(t *testing.T) {
		if got, want := len(readAll(t, s, "c_2")), 4; got != want {
			t.Fatalf("c_2 holds %d events after pruning c_1, want %d", got, want)
		}
	})
	t.Run("NeverBackwards", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", ids[1], 3)
		if err != nil || removed != 0 {
			t.Fatalf("Prune(%d) = %d, %v; want 0, nil", ids[1], removed, err)
		}
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: seq(ids[4]), PrunedThrough: seq(ids[3]), LastEventID: last})
	})
	t.Run("All", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", ids[9]+100, 4)
		if err != nil || removed != 6 {
			t.Fatalf("Prune(beyond the end) = %d, %v; want 6, nil", removed, err)
		}
		// pruned_through is the highest id removed, not the argument.
		marks := sandbox.Marks{OldestEventID: 0, PrunedThrough: last, LastEventID: last}
		WantMarks(t, s, "c_1", marks)
		if got := mustRead(t, s, "c_1", 0, 100); len(got) != 0 {
			t.Fatalf("Read(0) = %v, want nothing", recordIDs(got))
		}
		if got := mustRead(t, s, "c_1", ids[9], 100); len(got) != 0 {
			t.Fatalf("Read(last) = %v, want nothing", recordIDs(got))
		}
		wantCursorErr(t, s, "c_1", ids[9]-1, sandbox.ECursorPruned, marks)
	})
	t.Run("AppendAfter", func(t *testing.T) {
		got := mustAppend(t, s, "c_1", textEvents(2)...)
		if got[0] <= ids[9] || !increasing(got) {
			t.Fatalf("ids = %v, want increasing after %d", got, ids[9])
		}
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: seq(got[0]), PrunedThrough: last, LastEventID: seq(got[1])})
		if read := recordIDs(mustRead(t, s, "c_1", 0, 100)); !slices.Equal(read, got) {
			t.Fatalf("Read(0) = %v, want %v", read, got)
		}
	})
}

func testCompact(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	// c_2's events between c_1's: a store with one sequence for all logs
	// gives them ids inside c_1's range.
	ids := mustAppend(t, s, "c_1", textEvents(4)...)
	other := mustAppend(t, s, "c_2", textEvents(2)...)
	ids = append(ids, mustAppend(t, s, "c_1", textEvents(4)...)...)
	if _, err := s.Prune(ctx, "c_1", ids[1], 10); err != nil {
		t.Fatal(err)
	}
	seq := func(id uint64) sandbox.Seq { return sandbox.Seq(id) }

	t.Run("Middle", func(t *testing.T) {
		// Ids of another sandbox, pruned ones and unknown ones are skipped.
		removed, err := s.Compact(ctx, "c_1", []uint64{ids[4], ids[3], ids[4], ids[0], other[0], ids[7] + 1000})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := removed, 2; got != want {
			t.Fatalf("removed = %d, want %d", got, want)
		}
		want := []uint64{ids[2], ids[5], ids[6], ids[7]}
		if got := recordIDs(readAll(t, s, "c_1")); !slices.Equal(got, want) {
			t.Fatalf("log = %v, want %v", got, want)
		}
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: seq(ids[2]), PrunedThrough: seq(ids[1]), LastEventID: seq(ids[7])})
		if got := recordIDs(readAll(t, s, "c_2")); !slices.Equal(got, other) {
			t.Fatalf("c_2 log = %v, want %v untouched", got, other)
		}
	})
	t.Run("CursorOnRemovedID", func(t *testing.T) {
		// A cursor on a compacted id is still a valid position.
		if got, want := recordIDs(mustRead(t, s, "c_1", ids[3], 10)), []uint64{ids[5], ids[6], ids[7]}; !slices.Equal(got, want) {
			t.Fatalf("Read(%d) = %v, want %v", ids[3], got, want)
		}
	})
	t.Run("First", func(t *testing.T) {
		removed, err := s.Compact(ctx, "c_1", []uint64{ids[2]})
		if err != nil || removed != 1 {
			t.Fatalf("Compact(first) = %d, %v; want 1, nil", removed, err)
		}
		// pruned_through stays: only a prune moves it.
		WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: seq(ids[5]), PrunedThrough: seq(ids[1]), LastEventID: seq(ids[7])})
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), []uint64{ids[5], ids[6], ids[7]}; !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
		if got, want := recordIDs(mustRead(t, s, "c_1", ids[1], 10)), []uint64{ids[5], ids[6], ids[7]}; !slices.Equal(got, want) {
			t.Fatalf("Read(%d) = %v, want %v", ids[1], got, want)
		}
	})
	t.Run("Again", func(t *testing.T) {
		removed, err := s.Compact(ctx, "c_1", []uint64{ids[3], ids[4]})
		if err != nil || removed != 0 {
			t.Fatalf("Compact(removed ids) = %d, %v; want 0, nil", removed, err)
		}
	})
}

func testDrop(t *testing.T, open Opener) {
	ctx := context.Background()
	s := openStore(t, open)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_1", TS: T0,
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}}, textEvent("turn_1", "part_1", "x"))
	kept := mustAppend(t, s, "c_2", textEvents(2)...)
	if err := s.Drop(ctx, "c_1"); err != nil {
		t.Fatal(err)
	}
	t.Run("Gone", func(t *testing.T) {
		calls := map[string]func() error{
			"Sandbox": func() error { _, err := s.Sandbox(ctx, "c_1"); return err },
			"State":   func() error { _, err := s.State(ctx, "c_1"); return err },
			"Config":  func() error { _, err := s.Config(ctx, "c_1"); return err },
			"Read":    func() error { _, err := s.Read(ctx, "c_1", 0, 10); return err },
			"Head":    func() error { _, err := s.Head("c_1"); return err },
			"Turn":    func() error { _, err := s.Turn(ctx, "c_1", "turn_1"); return err },
			"Append":  func() error { return s.Append(ctx, "c_1", textEvents(1), nil) },
			"Drop":    func() error { return s.Drop(ctx, "c_1") },
		}
		for name, call := range calls {
			if got, want := errType(call()), sandbox.ENotFound; got != want {
				t.Fatalf("%s after Drop: error type %q, want %q", name, got, want)
			}
		}
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != "c_2" {
			t.Fatalf("listed after Drop: %s", mustJSON(t, list))
		}
	})
	t.Run("OthersKept", func(t *testing.T) {
		if got := recordIDs(readAll(t, s, "c_2")); !slices.Equal(got, kept) {
			t.Fatalf("c_2 log = %v, want %v", got, kept)
		}
	})
	t.Run("CreateAgain", func(t *testing.T) {
		mustCreate(t, s, "c_1")
		if recs := mustRead(t, s, "c_1", 0, 10); len(recs) != 0 {
			t.Fatalf("a recreated sandbox has the old log: %v", recordIDs(recs))
		}
		if _, err := s.Turn(ctx, "c_1", "turn_1"); errType(err) != sandbox.ENotFound {
			t.Fatalf("a recreated sandbox has the old turn: err = %v", err)
		}
		got := mustAppend(t, s, "c_1", textEvents(1)...)
		if read := recordIDs(readAll(t, s, "c_1")); !slices.Equal(read, got) {
			t.Fatalf("recreated log = %v, want %v", read, got)
		}
	})
}
