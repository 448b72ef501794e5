package boltstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func wantCursorErr(t *testing.T, s *Store, id string, after uint64, typ string, marks sandbox.Marks) {
	t.Helper()
	_, err := s.Read(context.Background(), id, after, 10)
	var serr *sandbox.Error
	if !errors.As(err, &serr) || serr.Type != typ {
		t.Fatalf("Read(after %d): err = %v, want %s", after, err, typ)
	}
	if serr.Marks == nil || *serr.Marks != marks {
		t.Fatalf("Read(after %d): marks = %+v, want %+v", after, serr.Marks, marks)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(10)...)

	t.Run("OK", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", 4, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := removed, 4; got != want {
			t.Fatalf("removed = %d, want %d", got, want)
		}
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 5, PrunedThrough: 4, LastEventID: 10})
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 100)), seq(5, 10); !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
		if got, want := recordIDs(mustRead(t, s, "c_1", 4, 100)), seq(5, 10); !slices.Equal(got, want) {
			t.Fatalf("Read(4) = %v, want %v", got, want)
		}
	})
	t.Run("ErrCursorPruned", func(t *testing.T) {
		wantCursorErr(t, s, "c_1", 3, sandbox.ECursorPruned, sandbox.Marks{OldestEventID: 5, PrunedThrough: 4, LastEventID: 10})
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		wantCursorErr(t, s, "c_1", 11, sandbox.ECursorStale, sandbox.Marks{OldestEventID: 5, PrunedThrough: 4, LastEventID: 10})
	})
	t.Run("NeverBackwards", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", 2, 3)
		if err != nil || removed != 0 {
			t.Fatalf("Prune(2) = %d, %v; want 0, nil", removed, err)
		}
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 5, PrunedThrough: 4, LastEventID: 10})
	})
	t.Run("All", func(t *testing.T) {
		removed, err := s.Prune(ctx, "c_1", 100, 4)
		if err != nil || removed != 6 {
			t.Fatalf("Prune(100) = %d, %v; want 6, nil", removed, err)
		}
		// pruned_through is the highest id removed, not the argument.
		marks := sandbox.Marks{OldestEventID: 0, PrunedThrough: 10, LastEventID: 10}
		storetest.WantMarks(t, s, "c_1", marks)
		if got := mustRead(t, s, "c_1", 0, 100); len(got) != 0 {
			t.Fatalf("Read(0) = %v, want nothing", recordIDs(got))
		}
		if got := mustRead(t, s, "c_1", 10, 100); len(got) != 0 {
			t.Fatalf("Read(10) = %v, want nothing", recordIDs(got))
		}
		wantCursorErr(t, s, "c_1", 9, sandbox.ECursorPruned, marks)
	})
	t.Run("AppendAfter", func(t *testing.T) {
		if got, want := mustAppend(t, s, "c_1", textEvents(2)...), []uint64{11, 12}; !slices.Equal(got, want) {
			t.Fatalf("ids = %v, want %v", got, want)
		}
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 11, PrunedThrough: 10, LastEventID: 12})
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 100)), []uint64{11, 12}; !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
	})
}

// TestPruneConcurrent prunes in small batches while 8 writers append to the
// same log: every event above the final pruned_through is retained exactly
// once, none at or below it is, and the watermarks describe the log.
func TestPruneConcurrent(t *testing.T) {
	const writers, appends = 8, 60
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")

	var wg sync.WaitGroup
	var mu sync.Mutex
	var appended []uint64
	errs := make(chan error, writers+1)
	for range writers {
		wg.Go(func() {
			for range appends {
				evs := textEvents(2)
				if err := s.Append(ctx, "c_1", evs, nil); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				appended = append(appended, evs[0].ID, evs[1].ID)
				mu.Unlock()
			}
		})
	}
	var pruned int
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Chase the tail: prune up to half of what exists, until the writers
		// stop.
		for {
			head, err := s.Head("c_1")
			if err != nil {
				errs <- err
				return
			}
			n, err := s.Prune(ctx, "c_1", head.LastEventID/2, 7)
			if err != nil {
				errs <- err
				return
			}
			pruned += n
			mu.Lock()
			finished := len(appended) == writers*appends*2
			mu.Unlock()
			if finished {
				return
			}
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	sb, err := s.Sandbox(ctx, "c_1")
	if err != nil {
		t.Fatal(err)
	}
	through := uint64(sb.PrunedThrough)
	if through == 0 {
		t.Fatal("nothing was pruned while appending")
	}
	slices.Sort(appended)
	var want []uint64
	for _, id := range appended {
		if id > through {
			want = append(want, id)
		}
	}
	if got, want := pruned, len(appended)-len(want); got != want {
		t.Fatalf("Prune reported %d removed, want %d", got, want)
	}
	var got []uint64
	for after := uint64(0); ; {
		recs := mustRead(t, s, "c_1", after, 50)
		if len(recs) == 0 {
			break
		}
		got = append(got, recordIDs(recs)...)
		after = recs[len(recs)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("retained %v, want %v (pruned through %d)", got, want, through)
	}
	if want := (sandbox.Marks{OldestEventID: sandbox.Seq(want[0]), PrunedThrough: sb.PrunedThrough, LastEventID: sandbox.Seq(appended[len(appended)-1])}); sb.Marks() != want {
		t.Fatalf("marks = %+v, want %+v", sb.Marks(), want)
	}
}

func TestCompact(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(8)...)
	t.Run("OK", func(t *testing.T) {
		removed, err := s.Compact(ctx, "c_1", []uint64{6, 1, 5, 5, 42})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := removed, 3; got != want {
			t.Fatalf("removed = %d, want %d", got, want)
		}
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 2, PrunedThrough: 0, LastEventID: 8})
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 100)), []uint64{2, 3, 4, 7, 8}; !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
		// A cursor on a removed event is still a valid position.
		if got, want := recordIDs(mustRead(t, s, "c_1", 5, 100)), []uint64{7, 8}; !slices.Equal(got, want) {
			t.Fatalf("Read(5) = %v, want %v", got, want)
		}
	})
	t.Run("Last", func(t *testing.T) {
		if _, err := s.Compact(ctx, "c_1", []uint64{8}); err != nil {
			t.Fatal(err)
		}
		// The last id stays: it was handed out and a client may hold it.
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{OldestEventID: 2, PrunedThrough: 0, LastEventID: 8})
		if got := mustRead(t, s, "c_1", 8, 100); len(got) != 0 {
			t.Fatalf("Read(8) = %v, want nothing", recordIDs(got))
		}
	})
}

func TestDrop(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		mustAppend(t, s, "c_1", textEvents(3)...)
		if err := s.Drop(ctx, "c_1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sandbox(ctx, "c_1"); errType(err) != sandbox.ENotFound {
			t.Fatalf("Sandbox after Drop: err = %v, want not_found", err)
		}
		if _, err := s.Read(ctx, "c_1", 0, 10); errType(err) != sandbox.ENotFound {
			t.Fatalf("Read after Drop: err = %v, want not_found", err)
		}
		if err := s.Drop(ctx, "c_1"); errType(err) != sandbox.ENotFound {
			t.Fatalf("second Drop: err = %v, want not_found", err)
		}
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != "c_2" {
			t.Fatalf("Sandboxes after Drop = %v, want only c_2", list)
		}
	})
	t.Run("SameBatch", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvents(2)...)
		release := stallCommitter(t, s, "c_1")
		r1, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		r2, err := s.enqueue(ctx, &dropWrite{id: "c_1"})
		if err != nil {
			t.Fatal(err)
		}
		r3, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		r4, err := s.enqueue(ctx, &createWrite{sb: newSandbox("c_1")})
		if err != nil {
			t.Fatal(err)
		}
		r5, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		release()
		for i, want := range []string{"", "", sandbox.ENotFound, "", ""} {
			if got := errType(<-[]*request{r1, r2, r3, r4, r5}[i].done); got != want {
				t.Fatalf("request %d: error type %q, want %q", i+1, got, want)
			}
		}
		// The recreated sandbox is a new log.
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), []uint64{1}; !slices.Equal(got, want) {
			t.Fatalf("log of the recreated sandbox = %v, want %v", got, want)
		}
	})
}

func TestStats(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	mustAppend(t, s, "c_1", textEvents(5)...)
	if _, err := s.Prune(ctx, "c_1", 2, 10); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.FileSize <= 0 {
		t.Fatalf("file size = %d", st.FileSize)
	}
	want := []SandboxStats{
		{ID: "c_1", Status: sandbox.StatusReady, Events: 3, OldestEventID: 3, LastEventID: 5, PrunedThrough: 2},
		{ID: "c_2", Status: sandbox.StatusReady},
	}
	if !slices.Equal(st.Sandboxes, want) {
		t.Fatalf("sandboxes = %+v, want %+v", st.Sandboxes, want)
	}
}

// TestPruneShares checks that a prune queued with appends commits in their
// transaction, whichever of them was queued first, and that one queued
// alone still commits, also when the store closes under it.
func TestPruneShares(t *testing.T) {
	ctx := context.Background()
	for _, pruneFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("PruneFirst%v", pruneFirst), func(t *testing.T) {
			s := MustOpenStore(t)
			mustCreate(t, s, "c_1")
			mustAppend(t, s, "c_1", textEvents(10)...)
			mustCreate(t, s, "c_2")
			var commits []map[string]uint64
			s.hooks().afterCommit = func(last map[string]uint64) { commits = append(commits, last) }
			release := stallCommitter(t, s, "c_2")

			pruned := make(chan error, 1)
			enqueuePrune := func() {
				w := &pruneWrite{id: "c_1", through: 4, batch: 100}
				r, err := s.enqueue(ctx, w)
				if err != nil {
					t.Fatal(err)
				}
				go func() { pruned <- <-r.done }()
			}
			if pruneFirst {
				enqueuePrune()
			}
			r, w := enqueueAppend(t, s, "c_1", textEvents(1), nil)
			if !pruneFirst {
				enqueuePrune()
			}
			release()
			if err := <-r.done; err != nil {
				t.Fatal(err)
			}
			w.assignIDs()
			if err := <-pruned; err != nil {
				t.Fatal(err)
			}
			// The append and the prune commit together, in the batch after
			// the stalled one.
			var withC1 []map[string]uint64
			for _, c := range commits {
				if _, ok := c["c_1"]; ok {
					withC1 = append(withC1, c)
				}
			}
			if len(withC1) != 1 || withC1[0]["c_1"] != 11 {
				t.Fatalf("commits = %v, want one that takes c_1 through 11 and prunes it", commits)
			}
			storetest.WantMarks(t, s, "c_1", sandbox.Marks{LastEventID: 11, OldestEventID: 5, PrunedThrough: 4})
			if got, want := recordIDs(mustRead(t, s, "c_1", 4, 100)), seq(5, 11); !slices.Equal(got, want) {
				t.Fatalf("retained %v, want %v", got, want)
			}
		})
	}
	t.Run("Alone", func(t *testing.T) {
		path := t.TempDir() + "/sparkles.db"
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvents(10)...)
		w := &pruneWrite{id: "c_1", through: 4, batch: 100}
		r, err := s.enqueue(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		// Whether the committer holds the prune yet or not, closing
		// commits it.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-r.done; err != nil || w.removed != 4 {
			t.Fatalf("prune: removed %d, err %v; want 4", w.removed, err)
		}
		s = MustOpenStoreAt(t, path, Options{})
		storetest.WantMarks(t, s, "c_1", sandbox.Marks{LastEventID: 10, OldestEventID: 5, PrunedThrough: 4})
	})
}
