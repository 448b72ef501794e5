// Package bolttest opens boltstore stores for tests, as bbolt's own tests
// open theirs (its internal/btesting): on a fresh file in the test's
// temporary directory, and checked when the test ends, so a test that
// leaves the file inconsistent fails even when what it asserted held.
//
// Every test outside boltstore that opens a store uses it. boltstore's own
// tests, which open stores with unexported limits and hooks, use the
// helper of the same shape in its helpers_test.go.
package bolttest

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/boltstore"
)

// MustOpen opens a store on a new file in tb.TempDir.
func MustOpen(tb testing.TB) *boltstore.Store {
	tb.Helper()
	return MustOpenAt(tb, filepath.Join(tb.TempDir(), "sparkles.db"), boltstore.Options{})
}

// MustOpenAt opens a store at path with opts. When the test ends, a store
// it left open is checked (bbolt's consistency check and the store's own
// layout, boltstore.Store.Check) and closed; a test that closed the store
// itself, to open the file again, gets that check from the later open.
func MustOpenAt(tb testing.TB, path string, opts boltstore.Options) *boltstore.Store {
	tb.Helper()
	s, err := boltstore.Open(path, opts)
	if err != nil {
		tb.Fatalf("bolttest: open %s: %v", path, err)
	}
	tb.Cleanup(func() {
		if err := s.Check(); err != nil && !errors.Is(err, boltstore.ErrClosed) {
			tb.Errorf("bolttest: check %s at the end of the test: %v", path, err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("bolttest: close %s: %v", path, err)
		}
	})
	return s
}
