package boltstore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// unsettledInFile lists the unsettled bucket as the file holds it.
func unsettledInFile(tb testing.TB, s *Store) []string {
	tb.Helper()
	var ids []string
	err := s.view(func(tx *bbolt.Tx) error {
		u := tx.Bucket(bucketUnsettled)
		if u == nil {
			tb.Fatal("no unsettled bucket")
		}
		return u.ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k))
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// wantUnsettled checks what Unsettled answers and, once the WAL is
// materialized, what the file holds, then the whole layout.
func wantUnsettled(tb testing.TB, s *Store, step string, want ...string) {
	tb.Helper()
	got, err := s.Unsettled(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if !slices.Equal(got, want) {
		tb.Fatalf("%s: Unsettled = %q, want %q", step, got, want)
	}
	mustFlush(tb, s)
	if got := unsettledInFile(tb, s); !slices.Equal(got, want) {
		tb.Fatalf("%s: the unsettled bucket holds %q, want %q", step, got, want)
	}
	if err := s.Check(); err != nil {
		tb.Fatalf("%s: %v", step, err)
	}
}

func setStatus(tb testing.TB, s *Store, id, status string) {
	tb.Helper()
	mustMutate(tb, s, id, nil, func(st *sandbox.State) error {
		st.Sandbox.Status = status
		return nil
	})
}

func createWith(tb testing.TB, s *Store, id, status string) {
	tb.Helper()
	sb := newSandbox(id)
	sb.Status = status
	if err := s.Create(context.Background(), sb, nil); err != nil {
		tb.Fatal(err)
	}
}

// The unsettled bucket follows a sandbox through its life: in it while it
// is being created, while its agent may run and while a turn is open or
// queued; out of it once stopped, and once dropped.
func TestUnsettledFollows(t *testing.T) {
	s := MustOpenStore(t)
	ctx := context.Background()
	createWith(t, s, "c_1", sandbox.StatusCreating)
	createWith(t, s, "c_2", sandbox.StatusStopped)
	wantUnsettled(t, s, "created", "c_1")

	setStatus(t, s, "c_1", sandbox.StatusReady)
	wantUnsettled(t, s, "ready", "c_1")
	setStatus(t, s, "c_1", sandbox.StatusStopped)
	wantUnsettled(t, s, "stopped", []string{}...)

	// A stopped sandbox with a turn open: what a crash mid-turn leaves.
	appendTurn(t, s, "c_1", "turn_1", false)
	wantUnsettled(t, s, "turn open", "c_1")
	mustMutate(t, s, "c_1", []*sandbox.Event{{Type: sandbox.TypeTurnCompleted, TurnID: "turn_1", Data: &sandbox.TurnCompleted{
		Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn}}}, nil)
	wantUnsettled(t, s, "turn completed", []string{}...)

	// A queued turn keeps it unsettled, in the file too.
	mustMutate(t, s, "c_2", nil, func(st *sandbox.State) error {
		st.Sandbox.QueuedTurns = []sandbox.Turn{{ID: "turn_9", Object: "turn", SandboxID: "c_2", Status: sandbox.TurnQueued, CreatedAt: testNow}}
		return nil
	})
	wantUnsettled(t, s, "queued", "c_2")
	mustMutate(t, s, "c_2", nil, func(st *sandbox.State) error {
		st.Sandbox.QueuedTurns = nil
		return nil
	})

	setStatus(t, s, "c_1", sandbox.StatusReady)
	createWith(t, s, "c_3", sandbox.StatusBooting)
	wantUnsettled(t, s, "ready again", "c_1", "c_3")
	if err := s.Drop(ctx, "c_1"); err != nil {
		t.Fatal(err)
	}
	wantUnsettled(t, s, "dropped", "c_3")
	// Dropped with its change still in the WAL.
	setStatus(t, s, "c_3", sandbox.StatusStopping)
	if err := s.Drop(ctx, "c_3"); err != nil {
		t.Fatal(err)
	}
	wantUnsettled(t, s, "dropped from the WAL", []string{}...)
	// Created again under the same id, in one batch with its drop.
	createWith(t, s, "c_2b", sandbox.StatusStopped)
	release := stallCommitter(t, s, "c_2b")
	var reqs []*request
	for _, w := range []write{&dropWrite{id: "c_2"}, &createWrite{sb: newSandbox("c_2")}} {
		r, err := s.enqueue(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	release()
	for _, r := range reqs {
		if err := <-r.done; err != nil {
			t.Fatal(err)
		}
	}
	wantUnsettled(t, s, "dropped and created in one batch", "c_2")
}

// A write of a meta whose membership does not change touches no page of
// the bucket: it is only read.
func TestUnsettledWritesOnChange(t *testing.T) {
	s := MustOpenStore(t)
	for _, tc := range []struct {
		name   string
		in     bool // id in the bucket before
		status string
		writes bool
	}{
		{"UnsettledStays", true, sandbox.StatusReady, false},
		{"SettledStays", false, sandbox.StatusStopped, false},
		{"Settles", true, sandbox.StatusStopped, true},
		{"Unsettles", false, sandbox.StatusBooting, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.db.Update(func(tx *bbolt.Tx) error {
				u := tx.Bucket(bucketUnsettled)
				if err := setUnsettled(u, "c_1", tc.in); err != nil {
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			err = s.db.Update(func(tx *bbolt.Tx) error {
				sb := newSandbox("c_1")
				sb.Status = tc.status
				if err := markUnsettled(tx.Bucket(bucketUnsettled), "c_1", sb); err != nil {
					return err
				}
				if st := tx.Stats(); (st.GetNodeCount() > 0) != tc.writes {
					t.Errorf("pages changed: %v, want %v", !tc.writes, tc.writes)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	// The cleanup's check would find c_1 listed without a sandbox.
	if err := s.db.Update(func(tx *bbolt.Tx) error { return setUnsettled(tx.Bucket(bucketUnsettled), "c_1", false) }); err != nil {
		t.Fatal(err)
	}
}

// A crash leaves the bucket as the metas are; the WAL's replay moves both.
func TestUnsettledReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	createWith(t, s, "c_3", sandbox.StatusStopped)
	createWith(t, s, "c_4", sandbox.StatusStopped)
	// Only in the WAL: c_1 with a turn open, c_2 stopped, c_3 ready; and
	// c_4 stopped with a turn, then completed.
	setStatus(t, s, "c_1", sandbox.StatusStopped)
	appendTurn(t, s, "c_1", "turn_1", false)
	setStatus(t, s, "c_2", sandbox.StatusStopped)
	setStatus(t, s, "c_3", sandbox.StatusReady)
	appendTurn(t, s, "c_4", "turn_1", true)
	want := []string{"c_1", "c_3"}
	if got, err := s.Unsettled(context.Background()); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Unsettled before the crash = %q, %v; want %q", got, err, want)
	}
	if got, before := unsettledInFile(t, s), []string{"c_1", "c_2"}; !slices.Equal(got, before) {
		t.Fatalf("the bucket before the crash holds %q, want the metas' %q", got, before)
	}
	crashClose(t, s)
	if walEntries(t, path) == 0 {
		t.Fatal("the crash left an empty WAL: nothing to replay")
	}
	s = MustOpenStoreAt(t, path, Options{})
	if got := unsettledInFile(t, s); !slices.Equal(got, want) {
		t.Fatalf("the bucket after replay holds %q, want %q", got, want)
	}
	wantUnsettled(t, s, "after replay", want...)
}

// A file written before the bucket existed gets it at its open, built
// from every sandbox's meta, after the WAL a crash left is replayed.
func TestUnsettledBuiltAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	createWith(t, s, "c_3", sandbox.StatusFailed)
	mustFlush(t, s)
	setStatus(t, s, "c_2", sandbox.StatusStopped) // in the WAL only
	crashClose(t, s)
	dropUnsettledBucket(t, path)

	// Checked offline, a file without the bucket is not damaged.
	if err := CheckFile(context.Background(), path, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	s = MustOpenStoreAt(t, path, Options{})
	wantUnsettled(t, s, "built", "c_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Once built, it is kept: an open reads it, not the metas.
	s = MustOpenStoreAt(t, path, Options{})
	wantUnsettled(t, s, "reopened", "c_1")
}

func dropUnsettledBucket(tb testing.TB, path string) {
	tb.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket(bucketUnsettled) }); err != nil {
		tb.Fatal(err)
	}
}

// Check names a bucket that disagrees with the metas.
func TestCheckUnsettled(t *testing.T) {
	fixture := filepath.Join(t.TempDir(), "fixture.db")
	s := MustOpenStoreAt(t, fixture, Options{})
	mustCreate(t, s, "c_1")
	createWith(t, s, "c_2", sandbox.StatusStopped)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		change func(u *bbolt.Bucket) error
		want   string
	}{
		"Missing": {func(u *bbolt.Bucket) error { return u.Delete([]byte("c_1")) }, "sandbox c_1 is not listed but its meta is not settled"},
		"Settled": {func(u *bbolt.Bucket) error { return u.Put([]byte("c_2"), nil) }, "sandbox c_2 is listed but its meta is settled"},
		"Unknown": {func(u *bbolt.Bucket) error { return u.Put([]byte("c_9"), nil) }, "sandbox c_9 is listed but does not exist"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sparkles.db")
			copyFile(t, fixture, path)
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bbolt.Tx) error { return tc.change(tx.Bucket(bucketUnsettled)) }); err != nil {
				t.Fatal(err)
			}
			if err := (&Store{db: db}).Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an error about %q", err, tc.want)
			}
		})
	}
	t.Run("OK", func(t *testing.T) {
		if err := CheckFile(context.Background(), fixture, CompactOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}
