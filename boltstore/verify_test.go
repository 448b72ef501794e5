package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// damagedCopy copies the store file at from to a new data dir, lets damage
// change its bytes, and returns the copy's path.
func damagedCopy(tb testing.TB, from string, damage func(b []byte) []byte) string {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "sparkles.db")
	if err := os.WriteFile(path, damage(b), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// wantDamaged checks that err is a DamagedError saying problem.
func wantDamaged(tb testing.TB, err error, problem string) {
	tb.Helper()
	var d *DamagedError
	if !errors.As(err, &d) {
		tb.Fatalf("got %v, want a DamagedError", err)
	}
	if !strings.Contains(d.Problem, problem) {
		tb.Fatalf("problem %q does not say %q", d.Problem, problem)
	}
}

// TestOpenDamaged: a file that is not whole is refused by Open and by the
// offline tools with a DamagedError that says what is wrong; bbolt never
// gets to fault or panic on it, which would end the process (the test
// binary here) whatever the caller recovers.
func TestOpenDamaged(t *testing.T) {
	good := filepath.Join(t.TempDir(), "sparkles.db")
	fillAndPrune(t, good)
	const page = 4096
	cases := []struct {
		name    string
		damage  func(b []byte) []byte
		problem string
	}{
		{"ErrTruncated", func(b []byte) []byte { return b[:len(b)/2] }, "cut short"},
		{"ErrTooShort", func(b []byte) []byte { return b[:100] }, "less than its two meta pages"},
		{"ErrGarbage", func(b []byte) []byte {
			r := rand.New(rand.NewPCG(1, 2))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			return b
		}, "neither of its meta pages is valid"},
		{"ErrOverwritten", func(b []byte) []byte {
			r := rand.New(rand.NewPCG(3, 4))
			for i := 2 * page; i < len(b); i++ {
				b[i] = byte(r.Uint32())
			}
			return b
		}, "header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := damagedCopy(t, good, tc.damage)
			_, err := Open(path, Options{})
			wantDamaged(t, err, tc.problem)
			_, err = ReadStats(context.Background(), path, CompactOptions{})
			wantDamaged(t, err, tc.problem)
			_, _, err = CompactFile(context.Background(), path, fastCompact)
			wantDamaged(t, err, tc.problem)
			wantDamaged(t, CheckFile(context.Background(), path, CompactOptions{}), tc.problem)
			// Refused, the file is let go: nothing holds its lock.
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			f, _, err := openLocked(path, os.O_RDONLY, true, 0)
			if err != nil {
				t.Fatalf("the refused file is still locked: %v", err)
			}
			f.Close()
		})
	}
	t.Run("OK", func(t *testing.T) {
		if err := CheckFile(context.Background(), good, CompactOptions{}); err != nil {
			t.Fatal(err)
		}
		MustOpenStoreAt(t, good, Options{})
	})
}

// TestOpenCorruptBytes damages a good file one byte at a time, near the
// start of a page in use (its header, elements and first keys), opens it
// and reads and writes all of it: each time the store refuses it at open,
// or opens it and every read and write either works (the byte was in a
// value) or fails with an error; the process never crashes. A file a crash
// left (no free-page list) is checked whole before bbolt maps it: bbolt's
// scan at open then reads every page, faulting on a page past the file,
// asserting on a page that names another and panicking on a goroutine of
// its own for a key out of order or a page referenced twice, so the store
// must find those first. A file a server closed is checked at its top, and
// the pages below are read under guard as they are used.
func TestOpenCorruptBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crashed bool
	}{{"Closed", false}, {"Crashed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			orig, inUse := corruptible(t, tc.crashed)
			r := rand.New(rand.NewPCG(5, 6))
			n := 200
			if testing.Short() {
				n = 40
			}
			path := filepath.Join(t.TempDir(), "sparkles.db")
			damaged, structural, refused, found := 0, 0, 0, 0
			for range n {
				b := append([]byte(nil), orig...)
				i := inUse[r.IntN(len(inUse))]*4096 + r.IntN(256)
				b[i] ^= byte(1 + r.IntN(255))
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				// What db check, which reads every page, makes of it,
				// and which of those bbolt's own check of the structure
				// finds (db check also checks the store's layout: a key
				// whose byte changed may still be in order).
				if _, ok := errors.AsType[*DamagedError](CheckFile(context.Background(), path, CompactOptions{})); ok {
					damaged++
				}
				if structureDamaged(t, path) {
					structural++
				}
				s, err := Open(path, Options{})
				if err != nil {
					if _, ok := errors.AsType[*DamagedError](err); !ok {
						t.Fatalf("byte %d: %v, want a DamagedError", i, err)
					}
					refused++
					continue
				}
				if useAll(s) {
					found++
				}
				s.Close()
			}
			t.Logf("%d damaged files: db check finds %d (%d in the structure), the store's open refuses %d, reads and writes of the others find %d", n, damaged, structural, refused, found)
			if structural < n/2 {
				t.Fatalf("bbolt's check finds only %d of %d damaged files: the damage did not reach the structure", structural, n)
			}
			if tc.crashed && refused < structural {
				t.Fatalf("the store's open refused %d of the %d files db check finds damaged", refused, structural)
			}
		})
	}
}

// structureDamaged reports whether the file at path fails the whole check
// of its pages or bbolt's own consistency check.
func structureDamaged(tb testing.TB, path string) bool {
	tb.Helper()
	db, err := openOffline(path, time.Second)
	if err != nil {
		if _, ok := errors.AsType[*DamagedError](err); !ok {
			tb.Fatalf("open for the check: %v", err)
		}
		return true
	}
	defer db.Close()
	found := false
	err = guard(path, nil, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			for range tx.Check() { // drain: the checker blocks on each send
				found = true
			}
			return nil
		})
	})
	return found || err != nil
}

// corruptible writes a store of a few sandboxes, closed as a server
// closes it or left as a crash leaves it, and returns its bytes and its
// pages in use.
func corruptible(tb testing.TB, crashed bool) ([]byte, []int) {
	tb.Helper()
	good := filepath.Join(tb.TempDir(), "sparkles.db")
	limits := walLimits{}
	if crashed {
		// No commit writes the free-page list, as after a large prune
		// (syncFreelistFor): the open must check every page.
		limits.freelistMax = -1
	}
	s := mustOpenLimits(tb, good, Options{}, limits)
	for i := range 8 {
		id := fmt.Sprintf("c_%d", i)
		mustCreate(tb, s, id)
		for range 3 {
			mustAppend(tb, s, id, textEvents(100)...)
		}
	}
	if err := s.flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if crashed {
		// The last commit, an append, leaves the file without a free-page
		// list, as every commit here does; Close then writes nothing.
		s.hooks().keepWAL.Store(true)
		mustAppend(tb, s, "c_0", textEvents(1)...)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	orig, err := os.ReadFile(good)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := walkFile(bytes.NewReader(orig), int64(len(orig)), good, true)
	if err != nil {
		tb.Fatal(err)
	}
	if synced := ne.Uint64(orig[pageHeaderSize+32:]) != noFreelist || ne.Uint64(orig[4096+pageHeaderSize+32:]) != noFreelist; synced == crashed {
		tb.Fatalf("a free-page list written: %t, want %t", synced, !crashed)
	}
	var inUse []int
	for id := uint64(2); id < v.hwm; id++ {
		if v.seen[id/64]&(1<<(id%64)) != 0 {
			inUse = append(inUse, int(id))
		}
	}
	return orig, inUse
}

// useAll reads everything the store holds (every sandbox, state and log)
// and appends to every sandbox, and reports whether any of it met the
// damage: an error, or the store refusing writes.
func useAll(s *Store) (found bool) {
	ctx := context.Background()
	list, _, err := s.Sandboxes(ctx, "", 100)
	found = err != nil
	for _, sb := range list {
		if _, err := s.State(ctx, sb.ID); err != nil {
			found = true
		}
		for after := uint64(0); ; {
			recs, err := s.Read(ctx, sb.ID, after, 64)
			if err != nil {
				found = true
			}
			if len(recs) == 0 {
				break
			}
			after = recs[len(recs)-1].ID
		}
		if err := s.Append(ctx, sb.ID, textEvents(1), nil); err != nil {
			found = true
		}
	}
	return found || s.Writable() != nil
}

// TestDamageWhileServing: a page deep in a file a server closed (a
// sandbox's log) is not read at open; the store opens, and the reads that
// reach the page fail with a DamagedError instead of ending the process,
// after which writes are refused (the unavailable error, as /readyz says)
// while the other sandboxes are still read. The whole check of db check
// finds the page.
func TestDamageWhileServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	for _, id := range []string{"c_1", "c_2"} {
		mustCreate(t, s, id)
		mustAppend(t, s, id, textEvents(500)...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var root uint64
	viewFile(t, path, func(tx *bbolt.Tx) error {
		root = uint64(sandboxBucket(tx, "c_1").Bucket(bucketEvents).Root())
		return nil
	})
	if root == 0 {
		t.Fatal("the events root of c_1 is 0")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[root*4096 : (root+1)*4096])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// Opened without the cleanup's check, which would find the damage.
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("writable before the damage is met: %v", err)
	}
	_, err = s.Read(context.Background(), "c_1", 0, 10)
	wantDamaged(t, err, "bbolt failed reading it")
	if err := s.Writable(); !sandbox.IsType(err, sandbox.EUnavailable) {
		t.Fatalf("writable after the damage was met: %v, want the unavailable error", err)
	}
	if err := s.Append(context.Background(), "c_2", textEvents(1), nil); !sandbox.IsType(err, sandbox.EUnavailable) {
		t.Fatalf("an append after the damage: %v, want the unavailable error", err)
	}
	if recs := mustRead(t, s, "c_2", 0, 10); len(recs) != 10 {
		t.Fatalf("c_2 reads %d events, want 10", len(recs))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, CheckFile(context.Background(), path, CompactOptions{}), "page")
}

// TestReadHugeValue: a damaged leaf that gives an event a length of 1.5
// GiB is refused as damage before the event is copied: a read allocates
// what the file holds, not what a page claims (copying it first took
// gigabytes, several times that under the race detector).
func TestReadHugeValue(t *testing.T) {
	good := filepath.Join(t.TempDir(), "sparkles.db")
	s := mustOpenLimits(t, good, Options{}, walLimits{})
	mustCreate(t, s, "c_1")
	const marker = "the-event-whose-length-is-damaged"
	evs := textEvents(120)
	evs[60] = textEvent("", "part_1", marker)
	mustAppend(t, s, "c_1", evs...)
	if err := s.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := damagedCopy(t, good, func(b []byte) []byte {
		// The event's leaf in the events bucket: a copy of it may also lie
		// in a free page (the WAL it came through).
		for from := 0; ; {
			i := bytes.Index(b[from:], []byte(marker))
			if i < 0 {
				t.Fatal("no leaf of the file holds the event")
			}
			at := from + i
			from = at + 1
			page := b[at/4096*4096:][:4096]
			if ne.Uint16(page[8:]) != leafPage {
				continue
			}
			for e := range int(ne.Uint16(page[10:])) {
				off := pageHeaderSize + e*pageElementSize
				pos, ksize, vsize := int(ne.Uint32(page[off+4:])), int(ne.Uint32(page[off+8:])), int(ne.Uint32(page[off+12:]))
				if v := at % 4096; off+pos+ksize <= v && v < off+pos+ksize+vsize {
					ne.PutUint32(page[off+12:], 0x60000000)
					return b
				}
			}
		}
	})
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = s.Read(context.Background(), "c_1", 0, 200)
	runtime.ReadMemStats(&after)
	wantDamaged(t, err, "is 1610612736 bytes long in a file of")
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Errorf("the read allocated %d MiB", n>>20)
	}
}
