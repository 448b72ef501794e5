package boltstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// openInDataDir opens a store in a data dir of its own that the test may
// delete or move, checking its file every few milliseconds, with its log
// in the returned buffer.
func openInDataDir(t *testing.T, every time.Duration) (s *Store, dir string, log *syncbuf.Buffer) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	log = &syncbuf.Buffer{}
	s = MustOpenStoreAt(t, filepath.Join(dir, "sparkles.db"), Options{
		WatchInterval: every,
		Logger:        slog.New(slog.NewTextHandler(log, nil)),
	})
	return s, dir, log
}

// waitWritable waits until the store's Writable says want (nil or not).
func waitWritable(t *testing.T, s *Store, unavailable bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for (s.Writable() != nil) != unavailable {
		if time.Now().After(deadline) {
			t.Fatalf("Writable() = %v after 10s", s.Writable())
		}
		time.Sleep(time.Millisecond) // a poll of the condition: the watcher's tick is its own
	}
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if got, want := errType(err), sandbox.EUnavailable; got != want {
		t.Fatalf("%s: %v (type %q), want type %q", what, err, got, want)
	}
	if strings.Contains(err.Error(), string(filepath.Separator)+"sparkles.db") {
		t.Fatalf("%s: the error, which API clients read, names the host path: %v", what, err)
	}
}

// TestFileDeleted: the data dir deleted under a running store is noticed
// within a few watch intervals; from then on every write is refused with
// the typed unavailable error and reads keep serving what is open. It is
// logged once, however many writes are refused.
func TestFileDeleted(t *testing.T) {
	s, dir, log := openInDataDir(t, 5*time.Millisecond)
	ctx := context.Background()
	mustCreate(t, s, "c_1")
	ids := mustAppend(t, s, "c_1", textEvents(3)...)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, s, true)
	for range 20 {
		wantUnavailable(t, "append", s.Append(ctx, "c_1", textEvents(1), nil))
	}
	wantUnavailable(t, "create", s.Create(ctx, newSandbox("c_2"), nil))
	wantUnavailable(t, "drop", s.Drop(ctx, "c_1"))
	_, err := s.Prune(ctx, "c_1", ids[0], 10)
	wantUnavailable(t, "prune", err)
	s.checkFile() // another look changes nothing

	if got := recordIDs(mustRead(t, s, "c_1", 0, 10)); !slices.Equal(got, ids) {
		t.Fatalf("read after the delete: ids %v, want %v", got, ids)
	}
	st, err := s.State(ctx, "c_1")
	if err != nil || uint64(st.Sandbox.LastEventID) != ids[2] {
		t.Fatalf("state after the delete: last id %d, %v; want %d", st.Sandbox.LastEventID, err, ids[2])
	}
	if got := strings.Count(log.String(), "level=ERROR"); got != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", got, log)
	}
	if !strings.Contains(log.String(), "was deleted") || !strings.Contains(log.String(), "open_file=/proc/") {
		t.Fatalf("the ERROR line does not say what happened and where the open file is:\n%s", log)
	}
}

// TestFileReplaced: another file renamed over the path (a copy restored
// under a running server) is noticed the same way.
func TestFileReplaced(t *testing.T) {
	s, dir, log := openInDataDir(t, 5*time.Millisecond)
	mustCreate(t, s, "c_1")
	other := filepath.Join(dir, "restored.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, filepath.Join(dir, "sparkles.db")); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, s, true)
	wantUnavailable(t, "append", s.Append(context.Background(), "c_1", textEvents(1), nil))
	if !strings.Contains(log.String(), "was replaced") {
		t.Fatalf("the log does not say the file was replaced:\n%s", log)
	}
}

// TestFileBack: a data dir moved away and back leaves the same file at the
// path, and writes are taken again.
func TestFileBack(t *testing.T) {
	s, dir, log := openInDataDir(t, 5*time.Millisecond)
	mustCreate(t, s, "c_1")
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, s, true)
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, s, false)
	mustAppend(t, s, "c_1", textEvents(2)...)
	if !strings.Contains(log.String(), "is back") {
		t.Fatalf("the log does not say the file is back:\n%s", log)
	}
}

// TestFileCheckedOnFailedWrite: a commit that fails looks at the file at
// once, without waiting for the watcher, and answers with the typed error
// when the file is gone.
func TestFileCheckedOnFailedWrite(t *testing.T) {
	s, dir, _ := openInDataDir(t, time.Hour)
	mustCreate(t, s, "c_1")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.hooks().failCommit = func() error { return errors.New("disk went away") }
	wantUnavailable(t, "append", s.Append(context.Background(), "c_1", textEvents(1), nil))
	s.hooks().failCommit = nil
}
