package retention_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// turnLog is the events of one turn as the coordinator writes them: its
// turn.started, tools tool calls each naming a location of size bytes, and,
// when done, its turn.completed.
func turnLog(turnID string, tools, size int, done bool) []*sandbox.Event {
	evs := []*sandbox.Event{{Type: sandbox.TypeTurnStarted, TurnID: turnID, TS: t0,
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("flood")}}}
	for i := range tools {
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turnID, TS: t0, Data: &sandbox.ToolUpdated{
			ToolCallID: fmt.Sprintf("tool_%s_%d", turnID, i), Title: "Read", Kind: sandbox.ToolKindRead, Status: sandbox.ToolCompleted,
			Locations: []sandbox.Location{{Path: strings.Repeat("p", size)}},
		}})
	}
	if done {
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeTurnCompleted, TurnID: turnID, TS: t0,
			Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn}})
	}
	return evs
}

// logBytes is what the retained records of c_1 hold.
func logBytes(tb testing.TB, s retention.Store) uint64 {
	tb.Helper()
	var n uint64
	for _, r := range readAll(tb, s, "c_1") {
		n += uint64(len(r.JSON))
	}
	return n
}

// turnsOf returns the turn ids of the records, in order, once each.
func turnsOf(tb testing.TB, recs []sandbox.Record) []string {
	tb.Helper()
	var out []string
	for _, r := range recs {
		ev, err := r.Decode()
		if err != nil {
			tb.Fatal(err)
		}
		if len(out) == 0 || out[len(out)-1] != ev.TurnID {
			out = append(out, ev.TurnID)
		}
	}
	return out
}

func TestPruneByBytes(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(*boltstore.Store) retention.Store
	}{
		{"OK", func(s *boltstore.Store) retention.Store { return s }},
		{"ShortReads", func(s *boltstore.Store) retention.Store { return shortReads{s} }},
	} {
		t.Run(c.name, func(t *testing.T) { testPruneByBytes(t, c.store) })
	}
}

// testPruneByBytes fills a log with five finished turns of about 40 KiB
// and bounds it at 100 KiB: the three oldest go, whole, and the log is
// an eighth of its bound below it.
func testPruneByBytes(t *testing.T, store func(*boltstore.Store) retention.Store) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	var firsts, lasts []uint64
	for i := range 5 {
		ids := mustAppend(t, s, "c_1", turnLog(fmt.Sprintf("turn_%d", i), 10, 4<<10, true)...)
		firsts, lasts = append(firsts, ids[0]), append(lasts, ids[len(ids)-1])
	}
	const bound = 100 << 10
	l := retention.New(retention.Config{Store: store(s), MaxBytes: bound, Batch: 4})
	res := mustRun(t, l, t0)
	recs := readAll(t, s, "c_1")
	if got, want := turnsOf(t, recs), []string{"turn_3", "turn_4"}; !slices.Equal(got, want) {
		t.Fatalf("turns retained %v, want %v", got, want)
	}
	if got, want := recs[0].ID, firsts[3]; got != want {
		t.Fatalf("first retained event %d, want %d, the turn.started of turn_3", got, want)
	}
	if got, want := mustSandbox(t, s, "c_1").PrunedThrough, sandbox.Seq(lasts[2]); got != want {
		t.Fatalf("pruned_through %d, want %d, the turn.completed of turn_2", got, want)
	}
	if res.Pruned != int(lasts[2]) {
		t.Fatalf("pruned %d, want %d", res.Pruned, lasts[2])
	}
	log, _, err := s.LogBytes("c_1")
	if err != nil {
		t.Fatal(err)
	}
	if log > bound-bound/8 || log != logBytes(t, s) {
		t.Fatalf("log bytes %d (retained %d), want at most 7/8 of the bound %d", log, logBytes(t, s), bound)
	}
	if _, err := s.Read(context.Background(), "c_1", firsts[1], 10); sandbox.ErrorType(err) != sandbox.ECursorPruned {
		t.Fatalf("a cursor inside a pruned turn: %v, want cursor_pruned", err)
	}
	if got := mustRun(t, l, t0).Pruned; got != 0 {
		t.Fatalf("a second pass pruned %d, want 0", got)
	}
}

// TestPruneByBytesRunningTurn: the running turn is never pruned for bytes,
// however large; every finished turn before it is.
func TestPruneByBytesRunningTurn(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", turnLog("turn_0", 5, 4<<10, true)...)
	// An event outside any turn between them goes with the turn before.
	mustAppend(t, s, "c_1", toolEvent(t0, 99))
	running := mustAppend(t, s, "c_1", turnLog("turn_1", 30, 4<<10, false)...)
	if sb := mustSandbox(t, s, "c_1"); sb.CurrentTurn == nil || sb.CurrentTurn.ID != "turn_1" {
		t.Fatalf("current turn = %+v, want turn_1", sb.CurrentTurn)
	}
	l := retention.New(retention.Config{Store: s, MaxBytes: 64 << 10, Batch: 4})
	mustRun(t, l, t0)
	recs := readAll(t, s, "c_1")
	if got, want := recordIDs(recs), running; !slices.Equal(got, want) {
		t.Fatalf("retained %v, want the running turn whole: %v", got, want)
	}
	// Once it completes, it is a finished turn like any other.
	mustAppend(t, s, "c_1", turnLog("turn_2", 1, 10, true)...)
	mustRun(t, l, t0)
	if got := turnsOf(t, readAll(t, s, "c_1")); slices.Contains(got, "turn_0") || !slices.Contains(got, "turn_2") {
		t.Fatalf("turns retained %v", got)
	}
}

// TestPruneByBytesLargeTurn: a finished turn larger than the bound on its
// own is cut inside, and its end stays in the log.
func TestPruneByBytesLargeTurn(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", turnLog("turn_0", 2, 1<<10, true)...)
	big := mustAppend(t, s, "c_1", turnLog("turn_1", 40, 4<<10, true)...)
	const bound = 64 << 10
	l := retention.New(retention.Config{Store: s, MaxBytes: bound, Batch: 8})
	mustRun(t, l, t0)
	recs := readAll(t, s, "c_1")
	if got, want := turnsOf(t, recs), []string{"turn_1"}; !slices.Equal(got, want) {
		t.Fatalf("turns retained %v, want %v", got, want)
	}
	if got, want := recs[len(recs)-1].ID, big[len(big)-1]; got != want {
		t.Fatalf("last retained %d, want the turn.completed %d", got, want)
	}
	if recs[0].ID == big[0] {
		t.Fatal("the turn larger than the bound was kept whole")
	}
	if n := logBytes(t, s); n > bound {
		t.Fatalf("log holds %d bytes, want at most %d", n, bound)
	}
}

// TestNudge: a nudged loop prunes a log that grew past its bound without
// waiting for its interval.
func TestNudge(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	l := retention.New(retention.Config{Store: s, MaxBytes: 64 << 10, Interval: time.Hour})
	l.Start()
	t.Cleanup(func() { l.Close() })
	// The pass Start runs at once has nothing to do; once it is over,
	// only the nudge can prune before the hour is up.
	deadline := time.After(10 * time.Second)
	for {
		if last, _ := l.LastRun(); !last.IsZero() {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the first pass did not end")
		case <-time.After(time.Millisecond): // polling LastRun, which has no event
		}
	}
	for i := range 4 {
		mustAppend(t, s, "c_1", turnLog(fmt.Sprintf("turn_%d", i), 10, 4<<10, true)...)
	}
	l.Nudge("c_1")
	for {
		ch := s.Wait("c_1")
		if n, _, err := s.LogBytes("c_1"); err != nil {
			t.Fatal(err)
		} else if n <= 64<<10 {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("the nudged loop did not prune the log within its bound")
		}
	}
}
