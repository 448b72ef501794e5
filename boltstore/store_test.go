package boltstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
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

func TestCreate(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := MustOpenStore(t)
		sb := newSandbox("c_1")
		sb.LastEventID = 7 // a new log has no events, whatever the caller says
		if err := s.Create(ctx, sb, []byte(`{"secrets":{"k":"v"}}`)); err != nil {
			t.Fatal(err)
		}
		sb.Metadata["team"] = "changed after Create"

		got, err := s.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		want := newSandbox("c_1")
		if got, want := mustJSON(t, got), mustJSON(t, want); got != want {
			t.Fatalf("Sandbox = %s, want %s", got, want)
		}
		config, err := s.Config(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(config), `{"secrets":{"k":"v"}}`; got != want {
			t.Fatalf("Config = %s, want %s", got, want)
		}
		st, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustJSON(t, st.Sandbox), mustJSON(t, want); got != want {
			t.Fatalf("State.Sandbox = %s, want %s", got, want)
		}
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := head.Status, sandbox.StatusReady; got != want || head.LastEventID != 0 {
			t.Fatalf("Head = %+v, want status %s and no events", head, want)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		s := MustOpenStore(t)
		mustCreate(t, s, "c_1")
		err := s.Create(ctx, newSandbox("c_1"), nil)
		if got, want := errType(err), sandbox.EConflict; got != want {
			t.Fatalf("second Create: err = %v, want %s", err, want)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		s := MustOpenStore(t)
		err := s.Create(ctx, sandbox.Sandbox{}, nil)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("Create without id: err = %v, want %s", err, want)
		}
	})
}

func TestNotFound(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	mustCreate(t, s, "c_1")
	calls := map[string]func() error{
		"Sandbox": func() error { _, err := s.Sandbox(ctx, "c_2"); return err },
		"Config":  func() error { _, err := s.Config(ctx, "c_2"); return err },
		"State":   func() error { _, err := s.State(ctx, "c_2"); return err },
		"Head":    func() error { _, err := s.Head("c_2"); return err },
		"Read":    func() error { _, err := s.Read(ctx, "c_2", 0, 10); return err },
		"Append":  func() error { return s.Append(ctx, "c_2", textEvents(1), nil) },
		"Turn":    func() error { _, err := s.Turn(ctx, "c_2", "turn_1"); return err },
		"Approval": func() error {
			_, err := s.Approval(ctx, "c_2", "appr_1")
			return err
		},
		"TurnOfKnownSandbox":     func() error { _, err := s.Turn(ctx, "c_1", "turn_1"); return err },
		"ApprovalOfKnownSandbox": func() error { _, err := s.Approval(ctx, "c_1", "appr_1"); return err },
		"Drop":                   func() error { return s.Drop(ctx, "c_2") },
		"Prune":                  func() error { _, err := s.Prune(ctx, "c_2", 10, 10); return err },
		"Compact":                func() error { _, err := s.Compact(ctx, "c_2", []uint64{1}); return err },
		"EmptyID":                func() error { _, err := s.Sandbox(ctx, ""); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if got, want := errType(call()), sandbox.ENotFound; got != want {
				t.Fatalf("error type = %q, want %q", got, want)
			}
		})
	}
	t.Run("Wait", func(t *testing.T) {
		if !isClosed(s.Wait("c_2")) {
			t.Fatal("Wait on an unknown sandbox returned an open channel")
		}
	})
}

func TestSandboxes(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	// Created out of order: the list follows ids, which for real ids (ULIDs)
	// is creation order.
	for _, id := range []string{"c_03", "c_01", "c_05", "c_02", "c_04"} {
		mustCreate(t, s, id)
	}
	ids := func(list []sandbox.Sandbox) []string {
		var out []string
		for _, sb := range list {
			out = append(out, sb.ID)
		}
		return out
	}
	tests := []struct {
		name  string
		after string
		limit int
		want  []string
		more  bool
	}{
		{"First", "", 2, []string{"c_01", "c_02"}, true},
		{"Middle", "c_02", 2, []string{"c_03", "c_04"}, true},
		{"Last", "c_04", 2, []string{"c_05"}, false},
		{"ExactlyAll", "", 5, []string{"c_01", "c_02", "c_03", "c_04", "c_05"}, false},
		{"AfterUnknownID", "c_025", 2, []string{"c_03", "c_04"}, true},
		{"AfterEnd", "c_05", 2, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, more, err := s.Sandboxes(ctx, tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(list); !slices.Equal(got, tt.want) || more != tt.more {
				t.Fatalf("Sandboxes(%q, %d) = %v, more %v; want %v, more %v", tt.after, tt.limit, got, more, tt.want, tt.more)
			}
		})
	}
	t.Run("Watermarks", func(t *testing.T) {
		mustAppend(t, s, "c_02", textEvents(3)...)
		list, _, err := s.Sandboxes(ctx, "c_01", 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := list[0].LastEventID, sandbox.Seq(3); got != want {
			t.Fatalf("last_event_id = %d, want %d", got, want)
		}
		if got, want := list[0].OldestEventID, sandbox.Seq(1); got != want {
			t.Fatalf("oldest_event_id = %d, want %d", got, want)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, _, err := s.Sandboxes(ctx, "", 0)
		if got, want := errType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	})
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvent("", "part_1", "one"), textEvent("", "part_2", "two"))
	mustAppend(t, s, "c_1", textEvent("", "part_3", "three"))
	if _, err := s.Prune(ctx, "c_1", 3, 10); err != nil {
		t.Fatal(err)
	}
	before, err := s.State(ctx, "c_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = MustOpenStoreAt(t, path, Options{})
	t.Run("State", func(t *testing.T) {
		after, err := s.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustJSON(t, after), mustJSON(t, before); got != want {
			t.Fatalf("state after reopen = %s, want %s", got, want)
		}
	})
	t.Run("Head", func(t *testing.T) {
		head, err := s.Head("c_1")
		if err != nil {
			t.Fatal(err)
		}
		if head.LastEventID != 3 || head.PrunedThrough != 3 {
			t.Fatalf("head = %+v, want last 3, pruned through 3", head)
		}
	})
	t.Run("IDsContinue", func(t *testing.T) {
		// Every event was pruned; the sequence lives on in the bucket.
		if got, want := mustAppend(t, s, "c_1", textEvents(2)...), []uint64{4, 5}; !slices.Equal(got, want) {
			t.Fatalf("ids after reopen = %v, want %v", got, want)
		}
		if got, want := recordIDs(mustRead(t, s, "c_1", 0, 10)), []uint64{4, 5}; !slices.Equal(got, want) {
			t.Fatalf("read after reopen = %v, want %v", got, want)
		}
		sb, err := s.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if sb.OldestEventID != 4 || sb.LastEventID != 5 || sb.PrunedThrough != 3 {
			t.Fatalf("marks = %+v, want oldest 4, last 5, pruned 3", marksOf(sb))
		}
	})
}
