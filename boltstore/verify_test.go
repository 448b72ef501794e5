package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
// start of a page in use (its header, elements and first keys), and opens
// it: each time the store opens it (the byte was in a value) or refuses it
// with an error; the process never crashes. bbolt's own scan at open
// faults on a page past the file, asserts on a page that names another,
// and panics on a goroutine of its own for a key out of order or a page
// referenced twice, so this holds only if the store finds those first.
func TestOpenCorruptBytes(t *testing.T) {
	good := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, good, Options{})
	for i := range 8 {
		id := fmt.Sprintf("c_%d", i)
		mustCreate(t, s, id)
		for range 3 {
			mustAppend(t, s, id, textEvents(100)...)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	v, err := walkFile(bytes.NewReader(orig), int64(len(orig)), good)
	if err != nil {
		t.Fatal(err)
	}
	var inUse []int
	for id := uint64(2); id < v.hwm; id++ {
		if v.seen[id/64]&(1<<(id%64)) != 0 {
			inUse = append(inUse, int(id))
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	n := 200
	if testing.Short() {
		n = 40
	}
	path := filepath.Join(t.TempDir(), "sparkles.db")
	opened, refused := 0, 0
	for range n {
		b := append([]byte(nil), orig...)
		i := inUse[r.IntN(len(inUse))]*4096 + r.IntN(256)
		b[i] ^= byte(1 + r.IntN(255))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{})
		if err != nil {
			if _, ok := errors.AsType[*DamagedError](err); !ok {
				t.Fatalf("byte %d: %v, want a DamagedError", i, err)
			}
			refused++
			continue
		}
		opened++
		// What opened is read through: the sandboxes and their states.
		list, _, _ := s.Sandboxes(context.Background(), "", 100)
		for _, sb := range list {
			s.State(context.Background(), sb.ID)
		}
		s.Close()
	}
	t.Logf("%d damaged files opened, %d refused", opened, refused)
	if refused < n/2 {
		t.Fatalf("only %d of %d damaged files refused: the damage did not reach the structure", refused, n)
	}
}
