package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
)

var _ storetest.Store = (*boltstore.Store)(nil)

// TestConformance runs the stores' shared suite on a fresh file per test;
// reopening closes the file and opens it again, as a restart does.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (storetest.Store, func() storetest.Store) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		cur := bolttest.MustOpenAt(t, path, boltstore.Options{})
		return cur, func() storetest.Store {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			cur = bolttest.MustOpenAt(t, path, boltstore.Options{})
			return cur
		}
	})
}
