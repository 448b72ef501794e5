package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// tailLen returns how many records of a sandbox only the WAL holds.
func tailLen(s *Store, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.sandboxes[id]; e != nil && e.wal != nil {
		return len(e.wal.recs)
	}
	return 0
}

// TestReadStraddle reads a log whose first records are in the events bucket
// and whose last ones only in the WAL, at every cursor: no gap, no
// duplicate, in order.
func TestReadStraddle(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(4)...)
	mustAppend(t, s, "c_1", textEvents(2)...)
	mustFlush(t, s)
	for range 4 {
		mustAppend(t, s, "c_1", textEvents(1)...)
	}
	if got, want := tailLen(s, "c_1"), 4; got != want {
		t.Fatalf("records only in the WAL = %d, want %d", got, want)
	}
	check := func(t *testing.T, first, last uint64) {
		t.Helper()
		for after := uint64(0); after <= last; after++ {
			if after != 0 && after+1 < first {
				continue // pruned
			}
			for _, limit := range []int{1, 2, 3, 5, 20} {
				from := max(after+1, first)
				want := seq(from, min(from+uint64(limit)-1, last))
				read := mustRead(t, s, "c_1", after, limit)
				if got := recordIDs(read); !slices.Equal(got, want) {
					t.Fatalf("Read(after %d, limit %d) = %v, want %v", after, limit, got, want)
				}
				// Scan visits the same records, byte for byte.
				scanned := []sandbox.Record{}
				err := s.Scan(ctx, "c_1", after, limit, func(rec sandbox.Record) error {
					rec.JSON = bytes.Clone(rec.JSON) // valid during the call only
					scanned = append(scanned, rec)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := mustJSON(t, scanned), mustJSON(t, append([]sandbox.Record{}, read...)); got != want {
					t.Fatalf("Scan(after %d, limit %d) = %s, want %s", after, limit, got, want)
				}
			}
		}
	}
	t.Run("OK", func(t *testing.T) { check(t, 1, 10) })
	t.Run("Pruned", func(t *testing.T) {
		if _, err := s.Prune(ctx, "c_1", 3, 10); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, "c_1", textEvents(2)...)
		if got := tailLen(s, "c_1"); got != 2 {
			t.Fatalf("records only in the WAL = %d, want 2", got)
		}
		check(t, 4, 12)
	})
	t.Run("Records", func(t *testing.T) {
		// What is read from the bucket and from memory is the same
		// record, byte for byte.
		mem := mustRead(t, s, "c_1", 10, 10)
		mustFlush(t, s)
		var disk []sandbox.Record
		_, err := s.readFile(ctx, "c_1", 10, 10, 12, sandbox.Marks{LastEventID: 12, PrunedThrough: 3}, true, func(rec sandbox.Record) error {
			disk = append(disk, rec)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustJSON(t, disk), mustJSON(t, mem); got != want {
			t.Fatalf("from the file %s, from memory %s", got, want)
		}
	})
}

// TestScanStops checks that an error from Scan's callback ends the scan,
// from the file and from memory, and is what Scan returns.
func TestScanStops(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(5)...)
	mustFlush(t, s)
	mustAppend(t, s, "c_1", textEvents(5)...)
	stop := errors.New("stop")
	for _, after := range []uint64{0, 7} { // from the file, from the WAL tail
		var seen []uint64
		err := s.Scan(ctx, "c_1", after, 100, func(rec sandbox.Record) error {
			seen = append(seen, rec.ID)
			if len(seen) == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) {
			t.Fatalf("after %d: Scan returned %v, want the callback's error", after, err)
		}
		if want := seq(after+1, after+2); !slices.Equal(seen, want) {
			t.Fatalf("after %d: visited %v, want %v", after, seen, want)
		}
	}
	if err := s.Scan(ctx, "c_1", 0, 0, func(sandbox.Record) error { return nil }); errType(err) != string(sandbox.EInvalidRequest) {
		t.Fatalf("limit 0: %v, want invalid_request", err)
	}
}

// TestResourcesFromTail checks that a turn or an approval an append changed
// is answered as soon as the append returns, from memory while only the WAL
// holds it and from the file after.
func TestResourcesFromTail(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	mustFlush(t, s)
	appendTurn(t, s, "c_1", "turn_1", false)
	if tailLen(s, "c_1") == 0 {
		t.Fatal("nothing in the WAL tail; the test would read the file")
	}
	check := func(t *testing.T) {
		turn, err := s.Turn(ctx, "c_1", "turn_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := turn.Status, sandbox.TurnRunning; got != want {
			t.Fatalf("turn status = %q, want %q", got, want)
		}
		a1, err := s.Approval(ctx, "c_1", "appr_1")
		if err != nil {
			t.Fatal(err)
		}
		if a1.Status != sandbox.ApprovalDone || a1.Decision == nil || *a1.Decision != sandbox.DecisionApproved {
			t.Fatalf("appr_1 = %s, want resolved approved", mustJSON(t, a1))
		}
		a2, err := s.Approval(ctx, "c_1", "appr_2")
		if err != nil {
			t.Fatal(err)
		}
		if a2.Status != sandbox.ApprovalPending {
			t.Fatalf("appr_2 = %s, want pending", mustJSON(t, a2))
		}
		if _, err := s.Approval(ctx, "c_1", "appr_3"); errType(err) != sandbox.ENotFound {
			t.Fatalf("appr_3: err = %v, want not_found", err)
		}
	}
	t.Run("Memory", check)
	t.Run("Copy", func(t *testing.T) {
		a, _ := s.Approval(ctx, "c_1", "appr_1")
		*a.Decision = "changed"
		turn, _ := s.Turn(ctx, "c_1", "turn_1")
		turn.Input[0].Text = "changed"
		check(t)
		if turn, _ := s.Turn(ctx, "c_1", "turn_1"); turn.Input[0].Text != "hi" {
			t.Fatal("a caller changed the store's turn")
		}
	})
	mustFlush(t, s)
	if got := tailLen(s, "c_1"); got != 0 {
		t.Fatalf("records only in the WAL after a flush = %d, want 0", got)
	}
	t.Run("File", check)
}

// TestMaterializeConcurrent materializes often (low limits) while writers
// append, readers follow the tails and a pruner chases two of the logs:
// readers see every id once and in order, the logs end as appended, and the
// file passes Check and reopens to the same logs.
func TestMaterializeConcurrent(t *testing.T) {
	const (
		sandboxes = 8
		pruned    = 2 // the first two logs are pruned while written
		writers   = 16
		appends   = 40
	)
	ctx := context.Background()
	path := t.TempDir() + "/sparkles.db"
	s := mustOpenLimits(t, path, Options{MaxBatch: 16},
		walLimits{maxRecords: 30, maxBytes: 1 << 20, chunkRecords: 10, chunkBytes: 1 << 20, truncateBatch: 7})
	var materialized atomic.Int64
	s.hooks().afterMaterialize = func() { materialized.Add(1) }
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%d", i)
		mustCreate(t, s, ids[i])
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers+sandboxes+pruned)
	var mu sync.Mutex
	appended := make(map[string][]uint64)
	for w := range writers {
		wg.Go(func() {
			id := ids[w%sandboxes]
			for i := range appends {
				evs := textEvents(1 + i%3)
				var mutate func(*sandbox.State) error
				if i%7 == 0 {
					mutate = func(st *sandbox.State) error { st.Sandbox.StatusDetail = fmt.Sprintf("%d/%d", w, i); return nil }
				}
				if err := s.Append(ctx, id, evs, mutate); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, ev := range evs {
					appended[id] = append(appended[id], ev.ID)
				}
				mu.Unlock()
			}
		})
	}
	stop := make(chan struct{})
	var others sync.WaitGroup
	for _, id := range ids[pruned:] {
		others.Go(func() {
			var cursor uint64
			for {
				wait := s.Wait(id)
				recs, err := s.Read(ctx, id, cursor, 5)
				if err != nil {
					errs <- err
					return
				}
				for _, rec := range recs {
					if rec.ID != cursor+1 {
						errs <- fmt.Errorf("%s: read id %d after %d", id, rec.ID, cursor)
						return
					}
					cursor = rec.ID
				}
				if len(recs) > 0 {
					continue
				}
				select {
				case <-wait:
				case <-stop:
					if head, _ := s.Head(id); cursor == head.LastEventID {
						return
					}
				}
			}
		})
	}
	for _, id := range ids[:pruned] {
		others.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				head, err := s.Head(id)
				if err != nil {
					errs <- err
					return
				}
				wait := s.Wait(id)
				if _, err := s.Prune(ctx, id, head.LastEventID/2, 5); err != nil {
					errs <- err
					return
				}
				select {
				case <-wait:
				case <-stop:
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	others.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if materialized.Load() == 0 {
		t.Fatal("nothing was materialized while appending")
	}

	logs := make(map[string][]uint64)
	for i, id := range ids {
		sb, err := s.Sandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		list := appended[id]
		slices.Sort(list)
		if want := seq(1, uint64(len(list))); !slices.Equal(list, want) {
			t.Fatalf("%s: ids handed out %v, want each of 1..%d once", id, list, len(list))
		}
		var want []uint64
		for _, n := range list {
			if n > uint64(sb.PrunedThrough) {
				want = append(want, n)
			}
		}
		if i < pruned && sb.PrunedThrough == 0 {
			t.Fatalf("%s: nothing was pruned while appending", id)
		}
		logs[id] = recordIDs(mustRead(t, s, id, 0, 10000))
		if !slices.Equal(logs[id], want) {
			t.Fatalf("%s: log %v, want %v (pruned through %d)", id, logs[id], want, sb.PrunedThrough)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	crashClose(t, s)
	s = MustOpenStoreAt(t, path, Options{})
	for _, id := range ids {
		if got := recordIDs(mustRead(t, s, id, 0, 10000)); !slices.Equal(got, logs[id]) {
			t.Fatalf("%s after reopen: log %v, want %v", id, got, logs[id])
		}
	}
}

// TestMaterializeLimits appends past the limits and checks that the records
// only the WAL holds stay bounded (backpressure) and that a chunk touches a
// bounded number of sandboxes.
func TestMaterializeLimits(t *testing.T) {
	t.Run("Backpressure", func(t *testing.T) {
		const maxRecords = 10
		s := mustOpenLimits(t, t.TempDir()+"/sparkles.db", Options{},
			walLimits{maxRecords: maxRecords, maxBytes: 1 << 20, chunkRecords: 3, chunkBytes: 1 << 20, truncateBatch: 4})
		for i := range 5 {
			mustCreate(t, s, fmt.Sprintf("c_%d", i))
		}
		for i := range 200 {
			mustAppend(t, s, fmt.Sprintf("c_%d", i%5), textEvents(1+i%3)...)
			s.mu.Lock()
			recs, entries := s.walRecs, s.walLen
			s.mu.Unlock()
			// One batch (one append of at most 3 events here) may be
			// answered before the committer materializes.
			if recs > maxRecords+3 || entries > maxRecords+1 {
				t.Fatalf("after %d appends the WAL holds %d records in %d entries; the limit is %d", i+1, recs, entries, maxRecords)
			}
		}
	})
	t.Run("ChunkSandboxes", func(t *testing.T) {
		s := mustOpenLimits(t, t.TempDir()+"/sparkles.db", Options{},
			walLimits{maxRecords: 1000, maxBytes: 1 << 20, chunkRecords: 1000, chunkBytes: 1 << 20, chunkSandboxes: 2, truncateBatch: 1000})
		var left []int // sandboxes with records only in the WAL, after each chunk
		s.hooks().afterMaterialize = func() {
			s.mu.Lock()
			left = append(left, len(s.tails))
			s.mu.Unlock()
		}
		for i := range 5 {
			id := fmt.Sprintf("c_%d", i)
			mustCreate(t, s, id)
			mustAppend(t, s, id, textEvents(2)...)
		}
		if err := s.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if want := []int{3, 1, 0}; !slices.Equal(left, want) {
			t.Fatalf("sandboxes left in the WAL after each chunk: %v, want %v", left, want)
		}
	})
}

// TestCommitFailure fails the transaction of a batch of appends: every
// request of it fails, nothing of it is published, and the next appends
// take the ids as if it had not been.
func TestCommitFailure(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	mustAppend(t, s, "c_1", textEvents(2)...)

	errDisk := errors.New("disk on fire")
	commits := 0 // the committer's alone
	s.hooks().failCommit = func() error {
		if commits++; commits == 2 { // the batch after the stalled one
			return errDisk
		}
		return nil
	}
	release := stallCommitter(t, s, "c_2")
	r1, w1 := enqueueAppend(t, s, "c_1", textEvents(1), nil)
	r2, w2 := enqueueAppend(t, s, "c_1", textEvents(2), func(st *sandbox.State) error {
		st.Sandbox.StatusDetail = "must not be published"
		return nil
	})
	release()

	for i, r := range []*request{r1, r2} {
		if err := <-r.done; !errors.Is(err, errDisk) {
			t.Fatalf("append %d of the failed batch: err = %v, want %v", i+1, err, errDisk)
		}
	}
	for id, want := range map[string]uint64{"c_1": 2, "c_2": 0} {
		if head, _ := s.Head(id); head.LastEventID != want {
			t.Fatalf("%s: last id %d after the failure, want %d", id, head.LastEventID, want)
		}
	}
	if st, _ := s.State(ctx, "c_1"); st.Sandbox.StatusDetail != "" {
		t.Fatalf("the failed batch's state was published: %s", mustJSON(t, st.Sandbox))
	}
	if got, want := mustAppend(t, s, "c_1", textEvents(1)...), []uint64{3}; !slices.Equal(got, want) {
		t.Fatalf("ids after the failure = %v, want %v (handed to %v and %v, never published)", got, want, w1.ids, w2.ids)
	}
	if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), seq(1, 3); !slices.Equal(got, want) {
		t.Fatalf("log = %v, want %v", got, want)
	}
}
