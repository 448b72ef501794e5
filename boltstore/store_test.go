package boltstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

func TestOpen(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		s := MustOpenStore(t)
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ErrInUse", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		MustOpenStoreAt(t, path, Options{})
		// flock conflicts between two opens of the file even in one
		// process, as it would with a second sparkles process.
		_, err := Open(path, Options{Timeout: 50 * time.Millisecond})
		if err == nil {
			t.Fatal("second open of a locked file succeeded")
		}
		if !errors.Is(err, bbolt.ErrTimeout) {
			t.Fatalf("err = %v, want it to wrap bbolt.ErrTimeout", err)
		}
		if got, want := err.Error(), "in use by another sparkles process"; !strings.Contains(got, want) {
			t.Fatalf("err = %q, want it to contain %q", got, want)
		}
	})
	t.Run("ErrBadPath", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing", "sparkles.db")
		_, err := Open(path, Options{})
		if err == nil {
			t.Fatal("open in a missing directory succeeded")
		}
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want a not-exist error naming %s", err, path)
		}
	})
	t.Run("ErrNotADatabase", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt file\n", 1024)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want an error naming %s", err, path)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		s, err := Open(filepath.Join(t.TempDir(), "sparkles.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, "c_1")
		wait := s.Wait("c_1")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !isClosed(wait) {
			t.Fatal("Close left a waiter blocked")
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := s.Append(context.Background(), "c_1", textEvents(1), nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Close: err = %v, want ErrClosed", err)
		}
	})
}

// A file a server closed is opened without a commit: its WAL is empty and
// its buckets are there, so a start writes no meta page and syncs nothing.
func TestOpenOfClosedFileCommitsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var closed int
	viewFile(t, path, func(tx *bbolt.Tx) error { closed = tx.ID(); return nil })
	s = MustOpenStoreAt(t, path, Options{})
	var opened int
	if err := s.view(func(tx *bbolt.Tx) error { opened = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	if opened != closed {
		t.Fatalf("the open committed: transaction %d, the file was closed at %d", opened, closed)
	}
	if _, err := s.Sandbox(context.Background(), "c_1"); err != nil {
		t.Fatalf("the sandbox of the closed file: %v", err)
	}
}
