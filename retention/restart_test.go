package retention_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var _ retention.Marker = (*boltstore.Store)(nil)

// counting is a store that counts the records it hands to the loop, by
// Read or by Scan; the store's other methods (Marker among them) pass
// through.
type counting struct {
	*boltstore.Store
	read atomic.Int64
}

func (c *counting) Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error) {
	recs, err := c.Store.Read(ctx, id, after, limit)
	c.read.Add(int64(len(recs)))
	return recs, err
}

func (c *counting) Scan(ctx context.Context, id string, after uint64, limit int, fn func(sandbox.Record) error) error {
	return c.Store.Scan(ctx, id, after, limit, func(rec sandbox.Record) error {
		c.read.Add(1)
		return fn(rec)
	})
}

// A restarted loop resumes where the last one left each log: its first
// pass reads at most each log's oldest record (to know its age) and a
// pass with nothing due reads none, instead of every event of every log.
func TestRestartReadsNoLog(t *testing.T) {
	s := MustOpenStore(t)
	const sandboxes = 8
	r := rand.New(rand.NewSource(1))
	total := 0
	for i := range sandboxes {
		id := fmt.Sprintf("c_%d", i)
		mustCreate(t, s, id)
		evs := genLog(r, id)
		total += len(evs)
		mustAppend(t, s, id, evs...)
		// A restart completes every open turn before retention runs
		// (coordinator.Recover).
		if cur := mustSandbox(t, s, id).CurrentTurn; cur != nil {
			total++
			mustAppend(t, s, id, &sandbox.Event{Type: sandbox.TypeTurnCompleted, TS: evs[len(evs)-1].TS, TurnID: cur.ID,
				Data: &sandbox.TurnCompleted{Status: sandbox.TurnFailed, StopReason: sandbox.StopError}})
		}
	}
	now := t0.Add(time.Hour) // nothing is old enough to prune by age
	first := retention.New(retention.Config{Store: &counting{Store: s}, Now: func() time.Time { return now }})
	res := mustRun(t, first, now)
	if res.Compacted == 0 || res.Pruned != 0 {
		t.Fatalf("first pass: %+v, want compactions and no prune", res)
	}
	kept := map[string][]uint64{}
	for i := range sandboxes {
		id := fmt.Sprintf("c_%d", i)
		kept[id] = recordIDs(readAll(t, s, id))
	}

	// A new loop over the same store: the server restarted.
	c := &counting{Store: s}
	again := retention.New(retention.Config{Store: c, Now: func() time.Time { return now }})
	res = mustRun(t, again, now)
	if res.Compacted+res.Pruned != 0 {
		t.Fatalf("first pass after a restart removed what the last loop kept: %+v", res)
	}
	if n := c.read.Load(); n > sandboxes {
		t.Fatalf("first pass after a restart read %d records of %d sandboxes (%d events in all), want at most one per sandbox", n, sandboxes, total)
	}
	c.read.Store(0)
	mustRun(t, again, now)
	if n := c.read.Load(); n != 0 {
		t.Fatalf("a pass with nothing due read %d records, want none", n)
	}
	for id, want := range kept {
		if got := recordIDs(readAll(t, s, id)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: retained %v, want %v", id, got, want)
		}
	}

	// What happens after the restart is compacted as before: a new turn
	// whose part was updated twice loses its first snapshot once it
	// completes. While it runs, a pass reads its new events only.
	evs := []*sandbox.Event{
		{Type: sandbox.TypeTurnStarted, TS: now, TurnID: "turn_new", Data: &sandbox.TurnStarted{Input: sandbox.TextInput("again")}},
		{Type: sandbox.TypeMessageUpdated, TS: now, TurnID: "turn_new", Data: &sandbox.MessageUpdated{MessageID: "m", PartID: "p", Kind: sandbox.PartText, Text: "a"}},
		{Type: sandbox.TypeMessageUpdated, TS: now, TurnID: "turn_new", Data: &sandbox.MessageUpdated{MessageID: "m", PartID: "p", Kind: sandbox.PartText, Text: "ab"}},
	}
	ids := mustAppend(t, s, "c_0", evs...)
	c.read.Store(0)
	if res := mustRun(t, again, now); res.Compacted != 0 {
		t.Fatalf("pass during a running turn: %+v, want nothing compacted", res)
	}
	if n := c.read.Load(); n != int64(len(evs)) {
		t.Fatalf("pass after %d new events read %d records", len(evs), n)
	}
	c.read.Store(0)
	mustRun(t, again, now)
	if n := c.read.Load(); n != 0 {
		t.Fatalf("a pass with a running turn and no new event read %d records, want none", n)
	}
	mustAppend(t, s, "c_0", &sandbox.Event{Type: sandbox.TypeTurnCompleted, TS: now, TurnID: "turn_new",
		Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: "end_turn"}})
	if res := mustRun(t, again, now); res.Compacted != 1 {
		t.Fatalf("pass after the turn completed: %+v, want 1 compacted", res)
	}
	for _, rec := range readAll(t, s, "c_0") {
		if rec.ID == ids[1] {
			t.Fatalf("event %d, a superseded snapshot of a finished turn, is still retained", ids[1])
		}
	}
}

// A restarted loop that does not know how many records a log holds counts
// them when the log's ids allow more than MaxEvents, and keeps exactly
// MaxEvents, compaction's holes notwithstanding.
func TestRestartCountsWhenIDsAllowMore(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	var evs []*sandbox.Event
	for k := range 10 {
		turn := fmt.Sprintf("turn_%d", k)
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeTurnStarted, TS: t0, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("go")}})
		for j := range 3 {
			evs = append(evs, &sandbox.Event{Type: sandbox.TypeMessageUpdated, TS: t0, TurnID: turn,
				Data: &sandbox.MessageUpdated{MessageID: "m", PartID: "p_" + turn, Kind: sandbox.PartText, Text: fmt.Sprint(j)}})
		}
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeTurnCompleted, TS: t0, TurnID: turn, Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: "end_turn"}})
	}
	mustAppend(t, s, "c_1", evs...) // 50 events, ids 1-50
	now := t0.Add(time.Hour)
	// Compaction alone: 20 superseded snapshots go, 30 events stay.
	first := retention.New(retention.Config{Store: s, MaxEvents: 100, Now: func() time.Time { return now }})
	if res := mustRun(t, first, now); res.Compacted != 20 {
		t.Fatalf("first pass: %+v, want 20 compacted", res)
	}
	// Restarted with a lower limit: 30 records under 50 ids.
	for _, limit := range []int{40, 25} {
		c := &counting{Store: s}
		again := retention.New(retention.Config{Store: c, MaxEvents: limit, Now: func() time.Time { return now }})
		mustRun(t, again, now)
		want := min(30, limit)
		if got := len(readAll(t, s, "c_1")); got != want {
			t.Fatalf("MaxEvents %d after a restart: %d retained, want %d", limit, got, want)
		}
	}
}
