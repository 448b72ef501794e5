package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// testLogBytes checks the byte counts a store keeps beside each log
// (sandbox.State.LogBytes, TurnBytes): what retention bounds a log by and
// the coordinator a turn. They are the bytes of the envelopes a reader
// gets, the same in every store, so every step compares them with what
// Read returns.
func testLogBytes(t *testing.T, open Opener) {
	ctx := context.Background()
	s, reopen := open(t)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")

	// want checks both counts of c_1: the log against what Read returns,
	// the turn against what the test appended since its turn.started (or
	// since the start, before any), sized as it was appended (turnSize).
	var turnSize uint64
	want := func(t *testing.T) {
		t.Helper()
		log, turn, err := s.LogBytes("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := log, sizeOf(readAll(t, s, "c_1")); got != want {
			t.Fatalf("log bytes = %d, want %d, what the retained events hold", got, want)
		}
		if got, want := turn, turnSize; got != want {
			t.Fatalf("turn bytes = %d, want %d, what the events since the turn.started hold", got, want)
		}
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if st.LogBytes != log || st.TurnBytes != turn {
			t.Fatalf("state counts %d and %d bytes, LogBytes %d and %d", st.LogBytes, st.TurnBytes, log, turn)
		}
	}
	var ids []uint64
	t.Run("Empty", func(t *testing.T) {
		want(t)
		if log, _, _ := s.LogBytes("c_1"); log != 0 {
			t.Fatalf("an empty log counts %d bytes", log)
		}
	})
	t.Run("Append", func(t *testing.T) {
		// Sizes that differ, and ids whose digits grow (the id is part of
		// the envelope).
		for i := range 12 {
			got := mustAppend(t, s, "c_1", bigText("", i, 100*i))
			ids, turnSize = append(ids, got...), turnSize+sized(t, s, got)
			if i%4 == 0 {
				mustAppend(t, s, "c_2", textEvents(1)...)
			}
		}
		want(t)
	})
	t.Run("Turn", func(t *testing.T) {
		got := mustAppend(t, s, "c_1", turnStarted("turn_1"), bigText("turn_1", 0, 2000), bigText("turn_1", 1, 3000))
		ids, turnSize = append(ids, got...), sized(t, s, got)
		got = mustAppend(t, s, "c_1", bigText("turn_1", 2, 500))
		ids, turnSize = append(ids, got...), turnSize+sized(t, s, got)
		want(t)
		// The next turn.started starts the count again.
		got = mustAppend(t, s, "c_1", turnStarted("turn_2"), bigText("turn_2", 0, 10))
		ids, turnSize = append(ids, got...), sized(t, s, got)
		want(t)
	})
	t.Run("MutateCannotMove", func(t *testing.T) {
		// The counts belong to the log, like the watermarks.
		evs := []*sandbox.Event{bigText("turn_2", 1, 700)}
		err := s.Append(ctx, "c_1", evs, func(st *sandbox.State) error {
			st.LogBytes, st.TurnBytes = 7, 7
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ids, turnSize = append(ids, evs[0].ID), turnSize+sized(t, s, []uint64{evs[0].ID})
		want(t)
	})
	t.Run("Prune", func(t *testing.T) {
		if _, err := s.Prune(ctx, "c_1", ids[4], 2); err != nil {
			t.Fatal(err)
		}
		want(t)
	})
	t.Run("Compact", func(t *testing.T) {
		if _, err := s.Compact(ctx, "c_1", []uint64{ids[5], ids[7], ids[8]}); err != nil {
			t.Fatal(err)
		}
		want(t)
		// Removed already, or pruned: nothing counts twice.
		if _, err := s.Compact(ctx, "c_1", []uint64{ids[3], ids[7]}); err != nil {
			t.Fatal(err)
		}
		want(t)
	})
	t.Run("OtherLog", func(t *testing.T) {
		log, _, err := s.LogBytes("c_2")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := log, sizeOf(readAll(t, s, "c_2")); got != want {
			t.Fatalf("c_2 log bytes = %d, want %d", got, want)
		}
	})
	t.Run("Reopen", func(t *testing.T) {
		if reopen == nil {
			t.Skip("the store cannot be reopened")
		}
		s = reopen()
		want(t)
		got := mustAppend(t, s, "c_1", bigText("turn_2", 2, 50))
		ids, turnSize = append(ids, got...), turnSize+sized(t, s, got)
		want(t)
	})
	t.Run("PruneAll", func(t *testing.T) {
		if _, err := s.Prune(ctx, "c_1", ids[len(ids)-1], 3); err != nil {
			t.Fatal(err)
		}
		want(t)
		if log, _, _ := s.LogBytes("c_1"); log != 0 {
			t.Fatalf("a log pruned whole counts %d bytes", log)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		if err := s.Drop(ctx, "c_2"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"c_2", "c_404"} {
			if _, _, err := s.LogBytes(id); errType(err) != sandbox.ENotFound {
				t.Fatalf("LogBytes(%s): err = %v, want not_found", id, err)
			}
		}
	})
}

// sizeOf is what records count for in a log's bytes.
func sizeOf(recs []sandbox.Record) uint64 {
	var n uint64
	for _, r := range recs {
		n += uint64(len(r.JSON))
	}
	return n
}

// sized reads back the records of c_1 with the given ids, just appended,
// and returns their size.
func sized(t *testing.T, s Store, ids []uint64) uint64 {
	t.Helper()
	var n uint64
	for _, id := range ids {
		recs := mustRead(t, s, "c_1", id-1, 1)
		if len(recs) == 0 || recs[0].ID != id {
			t.Fatalf("event %d, just appended, cannot be read back", id)
		}
		n += uint64(len(recs[0].JSON))
	}
	return n
}

func turnStarted(turnID string) *sandbox.Event {
	return &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turnID, TS: T0,
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}}
}

// bigText is a message.updated of about n bytes of text.
func bigText(turnID string, part, n int) *sandbox.Event {
	return textEvent(turnID, fmt.Sprintf("part_%d", part), strings.Repeat("x", n))
}
