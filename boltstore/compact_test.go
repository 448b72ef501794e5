package boltstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// fastCompact is CompactFile's options for tests: no lock grace after the swap.
var fastCompact = CompactOptions{Timeout: 50 * time.Millisecond, LockGrace: -1}

// fillAndPrune writes a file with three sandboxes whose logs were mostly
// pruned and compacted, so it has free pages to give back, and closes it.
func fillAndPrune(tb testing.TB, path string) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{Now: func() time.Time { return testNow }})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("c_%d", i)
		mustCreate(tb, s, id)
		for range 4 {
			mustAppend(tb, s, id, textEvents(1000)...)
		}
		if _, err := s.Prune(ctx, id, 3000, 500); err != nil {
			tb.Fatal(err)
		}
		last := mustRead(tb, s, id, 3500, 10)
		if _, err := s.Compact(ctx, id, recordIDs(last)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Drop(ctx, "c_2"); err != nil {
		tb.Fatal(err)
	}
	if err := s.Check(); err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	src, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		tb.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		tb.Fatal(err)
	}
}

// equalFiles compares two store files as CompactFile verifies its copy.
func equalFiles(tb testing.TB, a, b string) error {
	tb.Helper()
	adb, err := openOffline(a, time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer adb.Close()
	bdb, err := openOffline(b, time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer bdb.Close()
	return adb.View(func(atx *bbolt.Tx) error {
		return bdb.View(func(btx *bbolt.Tx) error { return equalRoots(context.Background(), atx, btx) })
	})
}

// tempFiles lists what CompactFile may have left beside the file.
func tempFiles(tb testing.TB, dir string) []string {
	tb.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.compact-*"))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestCompactFile(t *testing.T) {
	fixture := filepath.Join(t.TempDir(), "fixture.db")
	fillAndPrune(t, fixture)
	t.Run("OK", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "sparkles.db")
		copyFile(t, fixture, path)
		orig := filepath.Join(t.TempDir(), "orig.db")
		copyFile(t, path, orig)

		before, after, err := CompactFile(context.Background(), path, fastCompact)
		if err != nil {
			t.Fatal(err)
		}
		if after >= before {
			t.Fatalf("size after %d, want less than before %d", after, before)
		}
		if info, err := os.Stat(path); err != nil || info.Size() != after {
			t.Fatalf("file size %v (%v), want %d", info.Size(), err, after)
		}
		if err := equalFiles(t, orig, path); err != nil {
			t.Fatalf("compacted file differs from the original: %v", err)
		}
		if got := tempFiles(t, dir); len(got) != 0 {
			t.Fatalf("left behind %v", got)
		}

		// The store reopens the copy and goes on where it was: ids are not reused.
		s := MustOpenStoreAt(t, path, Options{})
		sb, err := s.Sandbox(context.Background(), "c_0")
		if err != nil {
			t.Fatal(err)
		}
		ids := mustAppend(t, s, "c_0", textEvent("", "part_1", "x"))
		if got, want := ids[0], uint64(sb.LastEventID)+1; got != want {
			t.Fatalf("next id %d, want %d", got, want)
		}
		if got, want := sb.PrunedThrough, uint64(3000); uint64(got) != want {
			t.Fatalf("pruned_through %d, want %d", got, want)
		}
	})
	t.Run("ErrInUse", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "sparkles.db")
		copyFile(t, fixture, path)
		s := MustOpenStoreAt(t, path, Options{})
		_, _, err := CompactFile(context.Background(), path, fastCompact)
		if !errors.Is(err, ErrInUse) {
			t.Fatalf("err = %v, want ErrInUse", err)
		}
		if got := tempFiles(t, dir); len(got) != 0 {
			t.Fatalf("left behind %v", got)
		}
		// The running store is unaffected.
		mustAppend(t, s, "c_0", textEvent("", "part_1", "x"))
	})
	t.Run("ErrNotExist", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing.db")
		if _, _, err := CompactFile(context.Background(), path, fastCompact); err == nil {
			t.Fatal("want an error for a missing file")
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat after a failed compact: %v; want the file still missing", err)
		}
	})
	t.Run("ErrCanceled", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "sparkles.db")
		copyFile(t, fixture, path)
		orig := filepath.Join(t.TempDir(), "orig.db")
		copyFile(t, path, orig)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := CompactFile(ctx, path, fastCompact); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if got := tempFiles(t, dir); len(got) != 0 {
			t.Fatalf("left behind %v", got)
		}
		a, _ := os.ReadFile(orig)
		b, _ := os.ReadFile(path)
		if string(a) != string(b) {
			t.Fatal("the original changed after a failed compact")
		}
	})
}

func TestEqualRoots(t *testing.T) {
	// The verification must catch a difference anywhere, or CompactFile
	// would trust a bad copy.
	dir := t.TempDir()
	base := filepath.Join(dir, "base.db")
	fillAndPrune(t, base)
	for name, change := range map[string]func(tx *bbolt.Tx) error{
		"Value": func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketSandboxes).Bucket([]byte("c_0")).Put(keyConfig, []byte(`{}`))
		},
		"MissingKey": func(tx *bbolt.Tx) error {
			events := tx.Bucket(bucketSandboxes).Bucket([]byte("c_1")).Bucket(bucketEvents)
			k, _ := events.Cursor().Last()
			return events.Delete(k)
		},
		"ExtraBucket": func(tx *bbolt.Tx) error {
			_, err := tx.Bucket(bucketSandboxes).CreateBucket([]byte("c_9"))
			return err
		},
		"Sequence": func(tx *bbolt.Tx) error {
			events := tx.Bucket(bucketSandboxes).Bucket([]byte("c_0")).Bucket(bucketEvents)
			return events.SetSequence(events.Sequence() + 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			other := filepath.Join(t.TempDir(), "other.db")
			copyFile(t, base, other)
			db, err := bbolt.Open(other, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(change); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if err := equalFiles(t, base, other); err == nil {
				t.Fatal("want a difference")
			}
		})
	}
	t.Run("OK", func(t *testing.T) {
		if err := equalFiles(t, base, base); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReadStats(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		fillAndPrune(t, path)
		st, err := ReadStats(context.Background(), path, fastCompact)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(st.Sandboxes), 2; got != want {
			t.Fatalf("sandboxes = %d, want %d", got, want)
		}
		s0 := st.Sandboxes[0]
		if got, want := s0.Events, 4000-3000-10; got != want {
			t.Fatalf("events = %d, want %d", got, want)
		}
		if got, want := s0.PrunedThrough, uint64(3000); got != want {
			t.Fatalf("pruned_through = %d, want %d", got, want)
		}
		if st.FreePages == 0 {
			t.Fatal("free pages = 0 after pruning, want some")
		}
		if info, _ := os.Stat(path); st.FileSize <= 0 || st.FileSize > info.Size() {
			t.Fatalf("size in use = %d, want within the file's %d", st.FileSize, info.Size())
		}
	})
	t.Run("ErrInUse", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		MustOpenStoreAt(t, path, Options{})
		if _, err := ReadStats(context.Background(), path, fastCompact); !errors.Is(err, ErrInUse) {
			t.Fatalf("err = %v, want ErrInUse", err)
		}
	})
}

// TestCompactLeftCopies: the copy a compaction killed half-way leaves
// beside the file is removed by the next compaction and by the next open
// of the store, but not while a compaction may still be writing it, and
// nothing that only looks like one is touched.
func TestCompactLeftCopies(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sparkles.db")
	fillAndPrune(t, path)
	leave := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 8192), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exists := func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	}
	kept := []string{leave("sparkles.db.compact-notdigits"), leave("other.db.compact-1"), leave("sparkles.db.compact-")}

	t.Run("Compact", func(t *testing.T) {
		left := leave("sparkles.db.compact-1234567")
		var removed []string
		opts := fastCompact
		opts.Removed = func(p string, size int64) { removed = append(removed, p) }
		if _, _, err := CompactFile(context.Background(), path, opts); err != nil {
			t.Fatal(err)
		}
		if exists(left) || len(removed) != 1 || removed[0] != left {
			t.Fatalf("removed %v; %s still there: %v", removed, left, exists(left))
		}
	})
	t.Run("InUse", func(t *testing.T) {
		// A compaction under way holds a shared lock on the file for as
		// long as its copy exists.
		running, err := openOffline(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		left := leave("sparkles.db.compact-7654321")
		opts := fastCompact
		opts.Removed = func(p string, size int64) { t.Errorf("removed %s while a compaction may write it", p) }
		if _, _, err := CompactFile(context.Background(), path, opts); err != nil {
			t.Fatal(err)
		}
		running.Close()
		if !exists(left) {
			t.Fatalf("%s was removed while a compaction may write it", left)
		}
	})
	t.Run("Open", func(t *testing.T) {
		left := leave("sparkles.db.compact-42")
		MustOpenStoreAt(t, path, Options{})
		if exists(left) {
			t.Fatalf("the store's open left %s", left)
		}
	})
	for _, p := range kept {
		if !exists(p) {
			t.Fatalf("%s, not a copy of a compaction, was removed", p)
		}
	}
}
