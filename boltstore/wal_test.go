package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// crashClose closes the store the way a crash right after its last commit
// leaves the file: whatever the WAL holds stays there, unmaterialized.
func crashClose(tb testing.TB, s *Store) {
	tb.Helper()
	s.hooks().keepWAL.Store(true)
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// viewFile runs fn in a read transaction of the closed store file at path.
func viewFile(tb testing.TB, path string, fn func(*bbolt.Tx) error) {
	tb.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		tb.Fatal(err)
	}
}

// walEntries counts the entries of the WAL bucket of a closed store file.
func walEntries(tb testing.TB, path string) int {
	tb.Helper()
	n := 0
	viewFile(tb, path, func(tx *bbolt.Tx) error {
		if wal := tx.Bucket(bucketWAL); wal != nil {
			n = wal.Stats().KeyN
		}
		return nil
	})
	return n
}

// view is everything a reader can ask a store about one sandbox.
type view struct {
	Sandbox   sandbox.Sandbox
	State     sandbox.State
	Head      any
	Log       []string
	Turns     map[string]sandbox.Turn
	Approvals map[string]sandbox.Approval
}

func viewOf(tb testing.TB, s *Store, id string, turns, approvals []string) string {
	tb.Helper()
	ctx := context.Background()
	var v view
	var err error
	if v.Sandbox, err = s.Sandbox(ctx, id); err != nil {
		tb.Fatal(err)
	}
	if v.State, err = s.State(ctx, id); err != nil {
		tb.Fatal(err)
	}
	if v.Head, err = s.Head(id); err != nil {
		tb.Fatal(err)
	}
	for after := uint64(0); ; {
		recs := mustRead(tb, s, id, after, 3)
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			v.Log = append(v.Log, fmt.Sprintf("%d %s %s", r.ID, r.Type, r.JSON))
		}
		after = recs[len(recs)-1].ID
	}
	v.Turns, v.Approvals = map[string]sandbox.Turn{}, map[string]sandbox.Approval{}
	for _, t := range turns {
		if v.Turns[t], err = s.Turn(ctx, id, t); err != nil {
			tb.Fatalf("turn %s: %v", t, err)
		}
	}
	for _, a := range approvals {
		if v.Approvals[a], err = s.Approval(ctx, id, a); err != nil {
			tb.Fatalf("approval %s: %v", a, err)
		}
	}
	return mustJSON(tb, v)
}

func mustMutate(tb testing.TB, s *Store, id string, evs []*sandbox.Event, mutate func(*sandbox.State) error) {
	tb.Helper()
	if err := s.Append(context.Background(), id, evs, mutate); err != nil {
		tb.Fatal(err)
	}
}

func mustFlush(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// appendTurn appends a turn's life as the coordinator writes it: queued by a
// mutate, started, a few message snapshots, a tool call, two approvals of
// which the first is resolved, and, when done, its completion.
func appendTurn(tb testing.TB, s *Store, id, turn string, done bool) {
	tb.Helper()
	queued := &sandbox.Turn{ID: turn, Object: "turn", SandboxID: id, Status: sandbox.TurnQueued, Input: sandbox.TextInput("hi"), CreatedAt: testNow}
	mustMutate(tb, s, id, nil, func(st *sandbox.State) error {
		st.Sandbox.CurrentTurn = queued.Clone()
		return nil
	})
	mustAppend(tb, s, id, &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}})
	mustAppend(tb, s, id, textEvent(turn, "part_1", "He"), textEvent(turn, "part_1", "Hello"))
	line := 7
	mustAppend(tb, s, id, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: &sandbox.ToolUpdated{
		ToolCallID: "tool_1", Title: "Read a.go", Kind: sandbox.ToolKindRead, Status: sandbox.ToolRunning,
		Locations: []sandbox.Location{{Path: "a.go", Line: &line}}}})
	for _, appr := range []string{"appr_1", "appr_2"} {
		mustAppend(tb, s, id, &sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: turn, Data: &sandbox.ApprovalRequested{
			ApprovalID: appr, ToolCallID: "tool_1", Title: "Run", Kind: sandbox.ToolKindExecute,
			Options: []sandbox.Option{{OptionID: "ok", Kind: sandbox.OptionAllowOnce, Label: "Allow"}}, ExpiresAt: testNow.Add(time.Hour)}})
	}
	mustAppend(tb, s, id, &sandbox.Event{Type: sandbox.TypeApprovalResolved, TurnID: turn, Data: &sandbox.ApprovalResolved{
		ApprovalID: "appr_1", Decision: sandbox.DecisionApproved, OptionID: "ok", Reason: sandbox.ReasonUser}})
	if done {
		mustMutate(tb, s, id, []*sandbox.Event{{Type: sandbox.TypeTurnCompleted, TurnID: turn, Data: &sandbox.TurnCompleted{
			Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn}}}, func(st *sandbox.State) error {
			st.Sandbox.StatusDetail = "idle"
			return nil
		})
	}
}

func TestCrashReplay(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		// c_1 is half materialized when the crash comes, c_2 not at all.
		appendTurn(t, s, "c_1", "turn_1", true)
		mustFlush(t, s)
		appendTurn(t, s, "c_1", "turn_2", false)
		appendTurn(t, s, "c_2", "turn_1", false)
		mustMutate(t, s, "c_2", nil, func(st *sandbox.State) error {
			st.Sandbox.Status, st.Sandbox.StatusDetail = sandbox.StatusStopping, "shutting down"
			return nil
		})
		before := map[string]string{
			"c_1": viewOf(t, s, "c_1", []string{"turn_1", "turn_2"}, []string{"appr_1", "appr_2"}),
			"c_2": viewOf(t, s, "c_2", []string{"turn_1"}, []string{"appr_1", "appr_2"}),
		}
		crashClose(t, s)
		if walEntries(t, path) == 0 {
			t.Fatal("the crash left an empty WAL: nothing to replay")
		}

		s = MustOpenStoreAt(t, path, Options{})
		if got := walEntries2(t, s); got != 0 {
			t.Fatalf("WAL entries after open = %d, want 0", got)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		after := map[string]string{
			"c_1": viewOf(t, s, "c_1", []string{"turn_1", "turn_2"}, []string{"appr_1", "appr_2"}),
			"c_2": viewOf(t, s, "c_2", []string{"turn_1"}, []string{"appr_1", "appr_2"}),
		}
		for id := range before {
			if before[id] != after[id] {
				t.Fatalf("%s after replay\n got %s\nwant %s", id, after[id], before[id])
			}
		}
		for id, want := range map[string]uint64{"c_1": 16, "c_2": 8} {
			if got := mustAppend(t, s, id, textEvents(1)...); got[0] != want {
				t.Fatalf("%s: next id after replay = %d, want %d", id, got[0], want)
			}
		}
	})
	t.Run("SharedCommit", func(t *testing.T) {
		// Three appends in one commit, two of them to the same sandbox,
		// share one WAL value; replay applies every entry of it.
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		mustCreate(t, s, "c_3")
		mustAppend(t, s, "c_1", textEvents(2)...)
		var commits int
		s.hooks().afterCommit = func(map[string]uint64) { commits++ }
		release := stallCommitter(t, s, "c_3")
		r1, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		r2, _ := enqueueAppend(t, s, "c_2", textEvents(2), nil)
		r3, _ := enqueueAppend(t, s, "c_1", textEvents(3), nil)
		release()
		for _, r := range []*request{r1, r2, r3} {
			if err := <-r.done; err != nil {
				t.Fatal(err)
			}
		}
		if commits > 2 {
			t.Fatalf("%d commits, want the three appends in one (the stalled one may join it)", commits)
		}
		want := map[string][]uint64{"c_1": seq(1, 6), "c_2": seq(1, 2)}
		crashClose(t, s)
		s = MustOpenStoreAt(t, path, Options{})
		for id, ids := range want {
			if got := recordIDs(mustRead(t, s, id, 0, 100)); !slices.Equal(got, ids) {
				t.Fatalf("%s after replay: %v, want %v", id, got, ids)
			}
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("DropAndCreate", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvent("", "part_old", "old"), textEvent("", "part_old", "older"))
		if err := s.Drop(ctx, "c_1"); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvent("", "part_new", "new"))
		// And all of it again inside one batch.
		mustCreate(t, s, "c_2")
		mustAppend(t, s, "c_2", textEvents(2)...)
		release := stallCommitter(t, s, "c_2")
		r1, _ := enqueueAppend(t, s, "c_2", []*sandbox.Event{textEvent("", "part_old", "old")}, nil)
		r2, err := s.enqueue(ctx, &dropWrite{id: "c_2"})
		if err != nil {
			t.Fatal(err)
		}
		r3, err := s.enqueue(ctx, &createWrite{sb: newSandbox("c_2")})
		if err != nil {
			t.Fatal(err)
		}
		r4, _ := enqueueAppend(t, s, "c_2", []*sandbox.Event{textEvent("", "part_new", "new")}, nil)
		release()
		for i, r := range []*request{r1, r2, r3, r4} {
			if err := <-r.done; err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
		mustAppend(t, s, "c_2", textEvent("", "part_new", "newer"))
		before := map[string]string{"c_1": viewOf(t, s, "c_1", nil, nil), "c_2": viewOf(t, s, "c_2", nil, nil)}
		crashClose(t, s)

		s = MustOpenStoreAt(t, path, Options{})
		for id, want := range before {
			if got := viewOf(t, s, id, nil, nil); got != want {
				t.Fatalf("%s after replay\n got %s\nwant %s", id, got, want)
			}
			if strings.Contains(want, "part_old") {
				t.Fatalf("%s: the recreated sandbox holds events of the dropped one: %s", id, want)
			}
		}
	})
	t.Run("Prune", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvents(5)...)
		if _, err := s.Prune(ctx, "c_1", 3, 10); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, "c_1", textEvents(2)...)
		crashClose(t, s)

		s = MustOpenStoreAt(t, path, Options{})
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 4, PrunedThrough: 3, LastEventID: 7})
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 100)), seq(4, 7); !slices.Equal(got, want) {
			t.Fatalf("log after replay = %v, want %v", got, want)
		}
		if got, want := mustAppend(t, s, "c_1", textEvents(1)...), []uint64{8}; !slices.Equal(got, want) {
			t.Fatalf("next id = %v, want %v", got, want)
		}
	})
	t.Run("Again", func(t *testing.T) {
		// A replayed file crashes again at once; the second open finds an
		// empty WAL and the same store.
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		appendTurn(t, s, "c_1", "turn_1", false)
		want := viewOf(t, s, "c_1", []string{"turn_1"}, []string{"appr_1"})
		crashClose(t, s)
		crashClose(t, MustOpenStoreAt(t, path, Options{}))
		if got := walEntries(t, path); got != 0 {
			t.Fatalf("WAL entries = %d after a replay, want 0", got)
		}
		s = MustOpenStoreAt(t, path, Options{})
		if got := viewOf(t, s, "c_1", []string{"turn_1"}, []string{"appr_1"}); got != want {
			t.Fatalf("after two opens\n got %s\nwant %s", got, want)
		}
	})
	t.Run("CleanClose", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvents(3)...)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := walEntries(t, path); got != 0 {
			t.Fatalf("WAL entries after Close = %d, want 0: Close materializes", got)
		}
	})
}

// walEntries2 counts the WAL entries of an open store.
func walEntries2(tb testing.TB, s *Store) int {
	tb.Helper()
	n := 0
	err := s.db.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(bucketWAL).Stats().KeyN
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestCrashImage copies the file while writers append (and the committer
// materializes), at a moment no transaction is between its commit and its
// publication: the copy is what a power cut then would leave. Opened, it
// must hold exactly what was published, and go on with the next ids.
func TestCrashImage(t *testing.T) {
	const sandboxes, writers = 6, 12
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sparkles.db")
	// valueMax 1: each sandbox's entries of a commit go in a WAL value of
	// their own, so a commit writes several keys (TestMaterializeConcurrent
	// runs with the default, where its commits fit in one value).
	s := mustOpenLimits(t, path, Options{}, walLimits{maxRecords: 40, maxBytes: 1 << 20, chunkRecords: 16, chunkBytes: 1 << 20, truncateBatch: 5, valueMax: 1})
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%d", i)
		mustCreate(t, s, ids[i])
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			id := ids[w%sandboxes]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var mutate func(*sandbox.State) error
				if i%5 == 0 {
					mutate = func(st *sandbox.State) error { st.Sandbox.StatusDetail = fmt.Sprintf("writer %d", w); return nil }
				}
				if err := s.Append(ctx, id, textEvents(1+i%2), mutate); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Let the log grow past a few materializations before the image.
	for {
		wait := s.Wait(ids[0])
		head, err := s.Head(ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if head.LastEventID >= 200 {
			break
		}
		waitClosed(t, wait, "append")
	}
	image := filepath.Join(t.TempDir(), "image.db")
	s.commitMu.Lock()
	heads := make(map[string]uint64)
	for _, id := range ids {
		head, err := s.Head(id)
		if err != nil {
			t.Fatal(err)
		}
		heads[id] = head.LastEventID
	}
	copyFile(t, path, image)
	s.commitMu.Unlock()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	logs := make(map[string][]sandbox.Record)
	for _, id := range ids {
		logs[id] = mustRead(t, s, id, 0, 100000)
	}
	if walEntries2(t, s) == 0 {
		t.Log("the WAL was empty at the end; the image may not exercise replay")
	}

	c := MustOpenStoreAt(t, image, Options{})
	for _, id := range ids {
		head, err := c.Head(id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := head.LastEventID, heads[id]; got != want {
			t.Fatalf("%s: last id in the image = %d, want the published %d", id, got, want)
		}
		got := mustRead(t, c, id, 0, 100000)
		if want := logs[id][:heads[id]]; !slices.EqualFunc(got, want, func(a, b sandbox.Record) bool {
			return a.ID == b.ID && bytes.Equal(a.JSON, b.JSON)
		}) {
			t.Fatalf("%s: the image's log (%d records) differs from the first %d published", id, len(got), len(want))
		}
		if next := mustAppend(t, c, id, textEvents(1)...); next[0] != heads[id]+1 {
			t.Fatalf("%s: next id in the image = %d, want %d", id, next[0], heads[id]+1)
		}
	}
}

// TestCheckLayout breaks each invariant of the layout in a closed file and
// expects Check to name it, and Open to refuse a WAL that would reuse ids.
func TestCheckLayout(t *testing.T) {
	fixture := filepath.Join(t.TempDir(), "fixture.db")
	s := MustOpenStoreAt(t, fixture, Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(3)...)
	mustFlush(t, s)
	mustAppend(t, s, "c_1", textEvents(2)...)
	crashClose(t, s)

	events := func(tx *bbolt.Tx) *bbolt.Bucket {
		return tx.Bucket(bucketSandboxes).Bucket([]byte("c_1")).Bucket(bucketEvents)
	}
	for name, tc := range map[string]struct {
		change  func(tx *bbolt.Tx) error
		want    string
		refused bool // Open fails on it
	}{
		"Sequence": {func(tx *bbolt.Tx) error { return events(tx).SetSequence(9) }, "events sequence", false},
		"KeyAboveSequence": {func(tx *bbolt.Tx) error {
			return events(tx).Put(idKey(4), []byte("\x00"))
		}, "above the sequence", false},
		"StateMarks": {func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketSandboxes).Bucket([]byte("c_1")).Put(keyState, []byte(`{"sandbox":{"last_event_id":"3"}}`))
		}, "state marks", false},
		"WALGap": {func(tx *bbolt.Tx) error {
			wal := tx.Bucket(bucketWAL)
			key, _ := wal.NextSequence()
			v, _ := walEntryOf(t, "c_1", nil, 9)
			return wal.Put(idKey(key), v)
		}, "event 9 where 6 was next", true},
		"WALMalformed": {func(tx *bbolt.Tx) error {
			wal := tx.Bucket(bucketWAL)
			key, _ := wal.NextSequence()
			return wal.Put(idKey(key), []byte{walEntryVersion, 200})
		}, errBadWALEntry.Error(), true},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sparkles.db")
			copyFile(t, fixture, path)
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tc.change); err != nil {
				t.Fatal(err)
			}
			// A Store without a committer checks the file as it is.
			err = (&Store{db: db}).Check()
			db.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an error about %q", err, tc.want)
			}
			if !tc.refused {
				return
			}
			if s, err := Open(path, Options{}); err == nil {
				s.Close()
				t.Fatal("Open replayed a WAL that does not continue the log")
			}
		})
	}
	t.Run("OK", func(t *testing.T) {
		db, err := bbolt.Open(fixture, 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := (&Store{db: db}).Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStatsWAL reads the stats of a file whose WAL was left by a crash, as
// the offline tool does, and of the running store: both count what only the
// WAL holds.
func TestStatsWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(3)...)
	mustFlush(t, s)
	mustAppend(t, s, "c_1", textEvents(2)...)
	mustMutate(t, s, "c_1", nil, func(st *sandbox.State) error { st.Sandbox.Status = sandbox.StatusStopped; return nil })
	crashClose(t, s)

	want := []SandboxStats{{ID: "c_1", Status: sandbox.StatusStopped, Events: 5, OldestEventID: 1, LastEventID: 5}}
	st, err := ReadStats(context.Background(), path, CompactOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Sandboxes, want) {
		t.Fatalf("offline stats = %+v, want %+v", st.Sandboxes, want)
	}
	s = MustOpenStoreAt(t, path, Options{})
	mustAppend(t, s, "c_1", textEvents(1)...)
	want[0].Events, want[0].LastEventID = 6, 6
	if st, err = s.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Sandboxes, want) {
		t.Fatalf("stats = %+v, want %+v", st.Sandboxes, want)
	}
}
