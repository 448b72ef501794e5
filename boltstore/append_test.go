package boltstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestAppend(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		evs := []*sandbox.Event{textEvent("", "part_1", "a"), textEvent("", "part_1", "ab")}
		if got, want := mustAppend(t, s, "c_1", evs...), []uint64{1, 2}; !slices.Equal(got, want) {
			t.Fatalf("ids = %v, want %v", got, want)
		}
		if got, want := mustAppend(t, s, "c_1", textEvent("", "part_1", "abc")), []uint64{3}; !slices.Equal(got, want) {
			t.Fatalf("ids = %v, want %v", got, want)
		}
		recs := mustRead(t, s, "c_1", 0, 10)
		if got, want := recordIDs(recs), []uint64{1, 2, 3}; !slices.Equal(got, want) {
			t.Fatalf("read ids = %v, want %v", got, want)
		}
		for i, text := range []string{"a", "ab", "abc"} {
			ev, err := recs[i].Decode()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ev.Data.(*sandbox.MessageUpdated).Text, text; got != want || ev.ID != recs[i].ID {
				t.Fatalf("record %d: id %d text %q, want id %d text %q", i, ev.ID, got, recs[i].ID, want)
			}
		}
		if got, want := evs[0].SandboxID, "c_1"; got != want {
			t.Fatalf("SandboxID = %q, want %q", got, want)
		}
	})
	t.Run("Golden", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		ev := textEvent("", "part_1", "hi <b>")
		ev.TS = testNow
		mustAppend(t, s, "c_1", ev)
		const want = `{"id":"1","object":"sandbox.event","version":"v1","type":"message.updated",` +
			`"ts":"2026-08-06T12:00:00.123Z","sandbox_id":"c_1","turn_id":null,` +
			`"data":{"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"hi \u003cb\u003e"}}`
		recs := mustRead(t, s, "c_1", 0, 1)
		if got := string(recs[0].JSON); got != want {
			t.Fatalf("record JSON\n got %s\nwant %s", got, want)
		}
		if got, want := recs[0].Type, sandbox.TypeMessageUpdated; got != want {
			t.Fatalf("record type = %q, want %q", got, want)
		}
		// On disk, once materialized from the WAL: 8-byte big-endian key,
		// then type length, type, envelope.
		if err := s.flush(ctx); err != nil {
			t.Fatal(err)
		}
		err := s.db.View(func(tx *bbolt.Tx) error {
			k, v := sandboxBucket(tx, "c_1").Bucket(bucketEvents).Cursor().First()
			if got, want := string(k), "\x00\x00\x00\x00\x00\x00\x00\x01"; got != want {
				return fmt.Errorf("key = %q, want %q", got, want)
			}
			if got, want := string(v), "\x0fmessage.updated"+want; got != want {
				return fmt.Errorf("value = %q, want %q", got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("TurnID", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		mustAppend(t, s, "c_1", textEvent("turn_1", "part_1", "x"))
		ev, err := mustRead(t, s, "c_1", 0, 1)[0].Decode()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ev.TurnID, "turn_1"; got != want {
			t.Fatalf("turn_id = %q, want %q", got, want)
		}
		if got, want := ev.TS, testNow.UTC().Truncate(time.Millisecond); !got.Equal(want) {
			t.Fatalf("ts = %v, want the store clock %v", got, want)
		}
	})
	t.Run("ErrCanceled", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Append(cctx, "c_1", textEvents(1), nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if head, _ := s.Head("c_1"); head.LastEventID != 0 {
			t.Fatalf("canceled append wrote events: last id %d", head.LastEventID)
		}
	})
}

// stallCommitter blocks the committer inside a transaction until release
// is called, so that requests enqueued meanwhile form the next batch
// together, in the order they were enqueued.
func stallCommitter(t *testing.T, s *Store, id string) (release func()) {
	t.Helper()
	entered, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Append(context.Background(), id, nil, func(*sandbox.State) error {
			close(entered)
			<-unblock
			return nil
		})
	}()
	<-entered
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// enqueueAppend does what Append does up to the queue and returns the
// request, so a test controls what shares a batch.
func enqueueAppend(t *testing.T, s *Store, id string, evs []*sandbox.Event, mutate func(*sandbox.State) error) (*request, *appendWrite) {
	t.Helper()
	w, err := s.newAppend(id, evs, mutate)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.enqueue(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	return r, w
}

func TestAppendMutate(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := MustOpenStore(t)
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
	})
	t.Run("ErrFailsOnlyItsCaller", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		mustCreate(t, s, "c_2")
		var commits int
		s.hooks().afterCommit = func(map[string]uint64) { commits++ }
		release := stallCommitter(t, s, "c_2")

		errMutate := errors.New("turn in progress")
		r1, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		failed := textEvents(2)
		r2, w2 := enqueueAppend(t, s, "c_1", failed, func(st *sandbox.State) error {
			st.Sandbox.Status = sandbox.StatusFailed // must be discarded
			st.Messages = append(st.Messages, sandbox.MessageUpdated{PartID: "part_x"})
			return errMutate
		})
		r3, _ := enqueueAppend(t, s, "c_1", textEvents(1), nil)
		release()

		if err := <-r1.done; err != nil {
			t.Fatal(err)
		}
		if err := <-r2.done; !errors.Is(err, errMutate) {
			t.Fatalf("failing mutate: err = %v, want %v", err, errMutate)
		}
		if err := <-r3.done; err != nil {
			t.Fatal(err)
		}
		if got, want := commits, 2; got != want { // the stalled one, then one batch
			t.Fatalf("commits = %d, want %d", got, want)
		}
		if got, want := w2.ids, []uint64{0, 0}; !slices.Equal(got, want) {
			t.Fatalf("failed append was assigned ids %v", got)
		}
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), []uint64{1, 2}; !slices.Equal(got, want) {
			t.Fatalf("log = %v, want %v", got, want)
		}
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Sandbox.Status != sandbox.StatusReady || len(st.Messages) != 1 || st.Sandbox.LastEventID != 2 {
			t.Fatalf("state = %s, want ready with one part and last id 2", mustJSON(t, st))
		}
	})
	t.Run("ErrPanic", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		err := s.Append(ctx, "c_1", textEvents(1), func(*sandbox.State) error { panic("bug") })
		if err == nil {
			t.Fatal("append with a panicking mutate succeeded")
		}
		if got, want := mustAppend(t, s, "c_1", textEvents(1)...), []uint64{1}; !slices.Equal(got, want) {
			t.Fatalf("ids after a panic = %v, want %v", got, want)
		}
	})
}

func TestRead(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	for range 6 {
		mustAppend(t, s, "c_1", textEvents(1)...)
	}
	check := func(t *testing.T) {
		for after := uint64(0); after <= 6; after++ {
			for _, limit := range []int{1, 2, 10} {
				want := seq(after+1, min(after+uint64(limit), 6))
				if got := recordIDs(mustRead(t, s, "c_1", after, limit)); !slices.Equal(got, want) {
					t.Fatalf("Read(after %d, limit %d) = %v, want %v", after, limit, got, want)
				}
			}
		}
	}
	if got, want := tailLen(s, "c_1"), 6; got != want {
		t.Fatalf("records only in the WAL = %d, want %d", got, want)
	}
	t.Run("WAL", check)
	mustFlush(t, s)
	if got := tailLen(s, "c_1"); got != 0 {
		t.Fatalf("records only in the WAL after a flush = %d, want 0", got)
	}
	t.Run("File", check)
	t.Run("ErrCursorStale", func(t *testing.T) {
		_, err := s.Read(ctx, "c_1", 7, 10)
		var serr *sandbox.Error
		if !errors.As(err, &serr) || serr.Type != sandbox.ECursorStale || serr.Marks == nil {
			t.Fatalf("err = %v, want cursor_stale with marks", err)
		}
		if got, want := *serr.Marks, (sandbox.Marks{OldestEventID: 1, LastEventID: 6}); got != want {
			t.Fatalf("marks = %+v, want %+v", got, want)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, err := s.Read(ctx, "c_1", 0, 0)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	})
}

// TestAppendConcurrent runs the shared concurrency test with a WAL that
// is moved into the buckets every few dozen records, so readers that fall
// behind read the file, and checks that no reader sees an id before its
// commit.
func TestAppendConcurrent(t *testing.T) {
	s := mustOpenLimits(t, t.TempDir()+"/sparkles.db", Options{MaxBatch: 64}, walLimits{maxRecords: 48})
	var mu sync.Mutex
	committed := make(map[string]uint64)
	s.hooks().afterCommit = func(last map[string]uint64) {
		mu.Lock()
		defer mu.Unlock()
		for id, n := range last {
			committed[id] = max(committed[id], n)
		}
	}
	storetest.Concurrent(t, s, storetest.Concurrency{
		Writers: 100, Sandboxes: 20, Appends: 20, Dense: true,
		OnRead: func(id string, rec sandbox.Record) error {
			mu.Lock()
			defer mu.Unlock()
			if rec.ID > committed[id] {
				return fmt.Errorf("%s: read id %d before it was committed", id, rec.ID)
			}
			return nil
		},
	})
}

// TestVisibility holds a transaction between its commit and its publication
// (in the afterCommit hook) and checks that no reader sees it yet: the file
// already holds the event, but bbolt may show a commit before its meta page
// is synced, so only what is published counts.
func TestVisibility(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStoreAt(t, t.TempDir()+"/sparkles.db", Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(2)...)
	mustFlush(t, s) // so a read from the start goes to the file

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.hooks().afterCommit = func(map[string]uint64) {
		once.Do(func() {
			close(held)
			<-release
		})
	}
	wait := s.Wait("c_1")
	appended := make(chan error, 1)
	go func() { appended <- s.Append(ctx, "c_1", textEvents(1), nil) }()
	<-held

	t.Run("ReadFile", func(t *testing.T) {
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), []uint64{1, 2}; !slices.Equal(got, want) {
			t.Fatalf("Read(0) = %v, want %v", got, want)
		}
	})
	t.Run("ReadHead", func(t *testing.T) {
		if got := mustRead(t, s, "c_1", 2, 10); len(got) != 0 {
			t.Fatalf("Read(2) = %v, want nothing", recordIDs(got))
		}
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		if _, err := s.Read(ctx, "c_1", 3, 10); errType(err) != sandbox.ECursorStale {
			t.Fatalf("Read(3): err = %v, want cursor_stale", err)
		}
	})
	t.Run("Resources", func(t *testing.T) {
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := s.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		list, _, err := s.Sandboxes(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for name, last := range map[string]uint64{
			"Head": head.LastEventID, "Sandbox": uint64(sb.LastEventID),
			"State": uint64(st.Sandbox.LastEventID), "Sandboxes": uint64(list[0].LastEventID),
		} {
			if last != 2 {
				t.Errorf("%s: last_event_id = %d before publication, want 2", name, last)
			}
		}
		if isClosed(wait) {
			t.Error("waiters woke before publication")
		}
	})

	close(release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	waitClosed(t, wait, "publication")
	if got, want := recordIDs(mustRead(t, s, "c_1", 2, 10)), []uint64{3}; !slices.Equal(got, want) {
		t.Fatalf("Read(2) after publication = %v, want %v", got, want)
	}
}

// TestWaitWakesEveryReader has readers follow sandboxes by Wait and Head
// alone while writers append one event at a time: the publisher closes the
// waiters' channels after letting go of the lock, and a reader that takes
// its channel before looking at the head must never miss the change that
// follows.
func TestWaitWakesEveryReader(t *testing.T) {
	const sandboxes, readers, events = 4, 8, 200
	s := MustOpenStore(t)
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%d", i)
		mustCreate(t, s, ids[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, sandboxes*(readers+1))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for range events {
				if err := s.Append(ctx, id, textEvents(1), nil); err != nil {
					errs <- err
					return
				}
			}
		})
		for range readers {
			wg.Go(func() {
				for {
					wait := s.Wait(id)
					head, err := s.Head(id)
					if err != nil {
						errs <- err
						return
					}
					if head.LastEventID == events {
						return
					}
					select {
					case <-wait:
					case <-ctx.Done():
						errs <- fmt.Errorf("%s: a reader at event %d of %d was never woken", id, head.LastEventID, events)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
