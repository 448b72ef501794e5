package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestPruneByAge(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	var ids []uint64
	for i := range 10 { // one event an hour, t0 .. t0+9h
		ids = append(ids, mustAppend(t, s, "c_1", toolEvent(t0.Add(time.Duration(i)*time.Hour), i))...)
	}
	l := retention.New(retention.Config{Store: s, MaxAge: 5 * time.Hour, Batch: 2})

	t.Run("OK", func(t *testing.T) {
		// The cutoff is t0+5h: the events of t0 .. t0+4h go, t0+5h stays.
		res := mustRun(t, l, t0.Add(10*time.Hour))
		if got, want := res.Pruned, 5; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[5:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
	t.Run("Idempotent", func(t *testing.T) {
		if got, want := mustRun(t, l, t0.Add(10*time.Hour)).Pruned, 0; got != want {
			t.Fatalf("pruned %d on a second pass, want %d", got, want)
		}
	})
	t.Run("ClockAdvances", func(t *testing.T) {
		if got, want := mustRun(t, l, t0.Add(12*time.Hour+time.Millisecond)).Pruned, 3; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[8:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
	t.Run("Everything", func(t *testing.T) {
		if got, want := mustRun(t, l, t0.Add(100*time.Hour)).Pruned, 2; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		sb := mustSandbox(t, s, "c_1")
		if got, want := sb.PrunedThrough, sandbox.Seq(ids[9]); got != want {
			t.Fatalf("pruned_through %d, want %d", got, want)
		}
		// Ids go on after an emptied log; the next event is the oldest.
		next := mustAppend(t, s, "c_1", toolEvent(t0.Add(100*time.Hour), 10))[0]
		if next <= ids[9] {
			t.Fatalf("next id %d reuses a pruned id (<= %d)", next, ids[9])
		}
		if got, want := mustSandbox(t, s, "c_1").OldestEventID, sandbox.Seq(next); got != want {
			t.Fatalf("oldest_event_id %d, want %d", got, want)
		}
	})
}

func TestPruneByCount(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(*boltstore.Store) retention.Store
	}{
		{"OK", func(s *boltstore.Store) retention.Store { return s }},
		// A store may answer a Read with fewer records than asked while
		// more follow: a pass still counts and prunes the whole log.
		{"ShortReads", func(s *boltstore.Store) retention.Store { return shortReads{s} }},
	} {
		t.Run(c.name, func(t *testing.T) { testPruneByCount(t, c.store) })
	}
	t.Run("SparseIDs", func(t *testing.T) {
		// With every other event compacted away, ids 1..100 hold 50 events;
		// keeping 20 means keeping the last 20 records, ids 62..100, not the
		// last 20 ids.
		s, ids := toolLog(t, 100)
		var even []uint64
		for _, id := range ids {
			if id%2 == 0 {
				even = append(even, id)
			}
		}
		if _, err := s.Compact(context.Background(), "c_1", even); err != nil {
			t.Fatal(err)
		}
		kept := recordIDs(readAll(t, s, "c_1"))
		l := retention.New(retention.Config{Store: s, MaxEvents: 20, Batch: 8})
		if got, want := mustRun(t, l, t0).Pruned, 30; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), kept[30:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
	t.Run("AfterRestart", func(t *testing.T) {
		// A new loop knows nothing and counts every log afresh.
		s, ids := toolLog(t, 30)
		mustRun(t, retention.New(retention.Config{Store: s, MaxEvents: 25}), t0)
		if got, want := mustRun(t, retention.New(retention.Config{Store: s, MaxEvents: 10}), t0).Pruned, 15; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[20:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
}

// testPruneByCount prunes a log of 50 events to 20, then 3 more, through
// the store that store makes of a bolt store.
func testPruneByCount(t *testing.T, store func(*boltstore.Store) retention.Store) {
	s, ids := toolLog(t, 50)
	l := retention.New(retention.Config{Store: store(s), MaxEvents: 20, Batch: 7})
	if got, want := mustRun(t, l, t0).Pruned, 30; got != want {
		t.Fatalf("pruned %d, want %d", got, want)
	}
	if got, want := recordIDs(readAll(t, s, "c_1")), ids[30:]; !slices.Equal(got, want) {
		t.Fatalf("retained %v, want %v", got, want)
	}
	// New events are counted on the next pass, from what is new only.
	ids = append(ids, mustAppend(t, s, "c_1", toolEvent(t0, 50), toolEvent(t0, 51), toolEvent(t0, 52))...)
	if got, want := mustRun(t, l, t0).Pruned, 3; got != want {
		t.Fatalf("pruned %d, want %d", got, want)
	}
	if got, want := recordIDs(readAll(t, s, "c_1")), ids[33:]; !slices.Equal(got, want) {
		t.Fatalf("retained %v, want %v", got, want)
	}
}

func TestWatermarks(t *testing.T) {
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	var evs []*sandbox.Event
	for i := range 12 {
		evs = append(evs, toolEvent(t0.Add(time.Duration(i)*time.Minute), i))
	}
	ids := mustAppend(t, s, "c_1", evs...)
	l := retention.New(retention.Config{Store: s, MaxEvents: 5, Batch: 3})
	mustRun(t, l, t0)

	want := sandbox.Marks{OldestEventID: sandbox.Seq(ids[7]), PrunedThrough: sandbox.Seq(ids[6]), LastEventID: sandbox.Seq(ids[11])}
	t.Run("Sandbox", func(t *testing.T) {
		sb := mustSandbox(t, s, "c_1")
		if got := (sandbox.Marks{OldestEventID: sb.OldestEventID, PrunedThrough: sb.PrunedThrough, LastEventID: sb.LastEventID}); got != want {
			t.Fatalf("marks %+v, want %+v", got, want)
		}
	})
	t.Run("State", func(t *testing.T) {
		st, err := s.State(context.Background(), "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Marks(); got != want {
			t.Fatalf("snapshot marks %+v, want %+v", got, want)
		}
	})
	t.Run("Head", func(t *testing.T) {
		h, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := h.PrunedThrough, ids[6]; got != want {
			t.Fatalf("head pruned_through %d, want %d", got, want)
		}
	})
	t.Run("List", func(t *testing.T) {
		list, _, err := s.Sandboxes(context.Background(), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := list[0].PrunedThrough, want.PrunedThrough; got != want {
			t.Fatalf("listed pruned_through %d, want %d", got, want)
		}
	})
	t.Run("ErrCursorPruned", func(t *testing.T) {
		_, err := s.Read(context.Background(), "c_1", ids[5], 10)
		if got, want := sandbox.ErrorType(err), sandbox.ECursorPruned; got != want {
			t.Fatalf("read below pruned_through: %v, want %s", err, want)
		}
	})
	t.Run("CursorAtMark", func(t *testing.T) {
		recs, err := s.Read(context.Background(), "c_1", ids[6], 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recordIDs(recs), ids[7:]; !slices.Equal(got, want) {
			t.Fatalf("read from pruned_through: %v, want %v", got, want)
		}
	})
}

func TestDropDeleted(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	s := MustOpenStore(t)
	mkdir := func(id string) string {
		dir := datadir.Dir(dataDir).Sandbox(id)
		if err := os.MkdirAll(dir.Work(), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir.Work(), "notes.txt"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return string(dir)
	}
	deleteAt := func(id string, at time.Time) {
		err := s.Append(ctx, id, nil, func(st *sandbox.State) error {
			st.Sandbox.Status, st.Sandbox.UpdatedAt = sandbox.StatusDeleted, at
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// c_old: deleted a day after its last event; c_live: old events, not
	// deleted; c_empty: deleted with an empty log.
	for _, id := range []string{"c_old", "c_live", "c_empty"} {
		mustCreate(t, s, id)
	}
	mustAppend(t, s, "c_old", toolEvent(t0, 1), toolEvent(t0.Add(time.Hour), 2))
	deleteAt("c_old", t0.Add(25*time.Hour))
	mustAppend(t, s, "c_live", toolEvent(t0, 1))
	deleteAt("c_empty", t0)
	oldDir, liveDir, emptyDir := mkdir("c_old"), mkdir("c_live"), mkdir("c_empty")

	l := retention.New(retention.Config{Store: s, MaxAge: 48 * time.Hour, DataDir: dataDir})

	t.Run("Young", func(t *testing.T) {
		// At t0+48h+30m the events of c_old are old but its deletion is not.
		res := mustRun(t, l, t0.Add(48*time.Hour+30*time.Minute))
		if got, want := res.Dropped, 1; got != want {
			t.Fatalf("dropped %d, want %d (c_empty only)", got, want)
		}
		if _, err := s.Sandbox(ctx, "c_old"); err != nil {
			t.Fatalf("c_old: %v, want it kept", err)
		}
		if _, err := os.Stat(oldDir); err != nil {
			t.Fatalf("c_old directory: %v, want it kept", err)
		}
		if _, err := s.Sandbox(ctx, "c_empty"); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("c_empty: %v, want not_found", err)
		}
		if _, err := os.Stat(emptyDir); !os.IsNotExist(err) {
			t.Fatalf("c_empty directory: %v, want it removed", err)
		}
	})
	t.Run("OK", func(t *testing.T) {
		res := mustRun(t, l, t0.Add(74*time.Hour))
		if got, want := res.Dropped, 1; got != want {
			t.Fatalf("dropped %d, want %d", got, want)
		}
		if _, err := s.Sandbox(ctx, "c_old"); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("c_old: %v, want not_found", err)
		}
		if _, err := os.Stat(oldDir); !os.IsNotExist(err) {
			t.Fatalf("c_old directory: %v, want it removed", err)
		}
	})
	t.Run("NotDeleted", func(t *testing.T) {
		// A sandbox that is not deleted loses its old events, never itself.
		sb := mustSandbox(t, s, "c_live")
		if got, want := sb.PrunedThrough, sb.LastEventID; got != want {
			t.Fatalf("c_live pruned_through %d, want %d", got, want)
		}
		if _, err := os.Stat(liveDir); err != nil {
			t.Fatalf("c_live directory: %v, want it kept", err)
		}
	})
}

func TestPruneDuringAppends(t *testing.T) {
	// Eight writers append while passes prune the log to its newest 50
	// events: nothing retained may be lost or duplicated, and nothing at or
	// below pruned_through may remain.
	const writers, batches, perBatch = 8, 10, 5
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	l := retention.New(retention.Config{Store: s, MaxEvents: 50, Batch: 8})

	type appended struct {
		id   uint64
		tool string
	}
	var (
		mu   sync.Mutex
		all  []appended
		wg   sync.WaitGroup
		done = make(chan struct{})
		errc = make(chan error, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]*sandbox.Event, perBatch)
				for i := range evs {
					evs[i] = toolEvent(t0, 0)
					evs[i].Data.(*sandbox.ToolUpdated).ToolCallID = fmt.Sprintf("tool_%d_%d_%d", w, b, i)
				}
				if err := s.Append(context.Background(), "c_1", evs, nil); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				for _, ev := range evs {
					all = append(all, appended{ev.ID, ev.Data.(*sandbox.ToolUpdated).ToolCallID})
				}
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	pruned := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		pruned += mustRun(t, l, t0).Pruned
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if pruned == 0 {
		t.Fatal("no pass pruned anything while the writers ran")
	}

	sb := mustSandbox(t, s, "c_1")
	recs := readAll(t, s, "c_1")
	if got, want := len(recs), 50; got != want {
		t.Fatalf("retained %d events, want %d", got, want)
	}
	byID := map[uint64]string{}
	for i, rec := range recs {
		if i > 0 && rec.ID <= recs[i-1].ID {
			t.Fatalf("ids out of order: %d after %d", rec.ID, recs[i-1].ID)
		}
		if rec.ID <= uint64(sb.PrunedThrough) {
			t.Fatalf("event %d retained at or below pruned_through %d", rec.ID, sb.PrunedThrough)
		}
		ev, err := rec.Decode()
		if err != nil {
			t.Fatal(err)
		}
		byID[rec.ID] = ev.Data.(*sandbox.ToolUpdated).ToolCallID
	}
	seenIDs, seenTools := map[uint64]bool{}, map[string]bool{}
	want := 0
	for _, a := range all {
		if seenIDs[a.id] || seenTools[a.tool] {
			t.Fatalf("id %d or %s handed out twice", a.id, a.tool)
		}
		seenIDs[a.id], seenTools[a.tool] = true, true
		if a.id <= uint64(sb.PrunedThrough) {
			continue
		}
		want++
		if got := byID[a.id]; got != a.tool {
			t.Fatalf("event %d holds %q, want %q", a.id, got, a.tool)
		}
	}
	if got := len(byID); got != want {
		t.Fatalf("retained %d events, appended %d above pruned_through", got, want)
	}
}

func TestLoop(t *testing.T) {
	s, _ := toolLog(t, 10)

	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	passed := make(chan struct{})
	var once sync.Once
	logger := slog.New(onMessage{"retention pass", func() { once.Do(func() { close(passed) }) }})
	l := retention.New(retention.Config{Store: s, MaxEvents: 4, Interval: time.Hour, Now: clock, Logger: logger})
	if l.Alive() {
		t.Fatal("alive before Start")
	}
	l.Start()
	// The first pass runs at once, not after the first interval.
	select {
	case <-passed:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass within 10s of Start")
	}
	if last, err := l.LastRun(); last.IsZero() || err != nil {
		t.Fatalf("last pass at %v: %v", last, err)
	}
	if got, want := mustSandbox(t, s, "c_1").PrunedThrough, sandbox.Seq(6); got != want {
		t.Fatalf("pruned_through %d, want %d", got, want)
	}
	if !l.Alive() {
		t.Fatal("not alive right after a pass")
	}
	mu.Lock()
	now = now.Add(4 * time.Hour) // three intervals with no pass: stuck
	mu.Unlock()
	if l.Alive() {
		t.Fatal("alive with no progress for three intervals")
	}
	mu.Lock()
	now = t0
	mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Alive() {
		t.Fatal("alive after Close")
	}
}

// onMessage is a log handler that calls f for every record with the given
// message, so a test can wait for what the loop logs.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onMessage) WithGroup(string) slog.Handler            { return h }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
