//go:build linux

package retention_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/nobody"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// syncBuffer is a log destination safe for the loop's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDropReadOnly: a deleted sandbox whose agent left read-only
// directories (0555, as `go mod download` leaves its module cache, and
// 0000) is dropped by the next pass, files and record. Root removes such a
// tree whatever its modes, so as root the test runs again as nobody, for
// whom os.RemoveAll alone fails on it. As root it also checks that a
// sandbox whose files resist removal whatever is done (a mount point in
// them) neither stops the pass for the others nor fails it, stays listed
// for the next pass, and is logged once, not at every pass.
func TestDropReadOnly(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	dataDir := t.TempDir()
	deleted := func(id string) string {
		t.Helper()
		mustCreate(t, s, id)
		mustAppend(t, s, id, toolEvent(t0, 1))
		err := s.Append(ctx, id, nil, func(st *sandbox.State) error {
			st.Sandbox.Status, st.Sandbox.UpdatedAt = sandbox.StatusDeleted, t0
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		dir := datadir.Dir(dataDir).Sandbox(id)
		for _, d := range []string{dir.Work(), dir.Home(), dir.Tmp()} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		return string(dir)
	}
	roDir := deleted("c_readonly")
	mod := filepath.Join(datadir.Sandbox(roDir).Home(), "go", "pkg", "mod", "example.com", "m@v1.2.3")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for d := mod; d != filepath.Join(datadir.Sandbox(roDir).Home(), "go"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	hidden := filepath.Join(datadir.Sandbox(roDir).Work(), "hidden")
	if err := os.MkdirAll(filepath.Join(hidden, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(hidden, 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(hidden, 0o755) }) // for TempDir's own removal if the drop fails

	// As root, a sandbox no chmod helps: a file system mounted in it.
	stuck := ""
	if os.Geteuid() == 0 {
		stuck = deleted("c_stuck")
		mnt := datadir.Sandbox(stuck).Work()
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount a tmpfs in a sandbox: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	}
	okDir := deleted("c_ok")

	var logs syncBuffer
	l := retention.New(retention.Config{Store: s, MaxAge: time.Hour, DataDir: dataDir,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for pass := range 2 {
		res, err := l.RunOnce(ctx, t0.Add(2*time.Hour))
		if err != nil {
			t.Fatalf("pass %d: %v; a sandbox whose files resist must not fail the pass", pass, err)
		}
		if pass == 0 && res.Dropped != 2 {
			t.Fatalf("the first pass dropped %d sandboxes, want c_readonly and c_ok", res.Dropped)
		}
	}
	for _, c := range []struct{ id, dir string }{{"c_readonly", roDir}, {"c_ok", okDir}} {
		if _, err := s.Sandbox(ctx, c.id); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Errorf("%s after the pass: %v, want it dropped", c.id, err)
		}
		if _, err := os.Lstat(c.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's directory after the pass: %v, want it removed", c.id, err)
		}
	}
	if stuck != "" {
		if _, err := s.Sandbox(ctx, "c_stuck"); err != nil {
			t.Errorf("c_stuck, whose files resist: %v, want it listed until they are gone", err)
		}
		if n := strings.Count(logs.String(), "sandbox_id=c_stuck"); n != 1 {
			t.Errorf("c_stuck was logged %d times in two passes, want once:\n%s", n, logs.String())
		}
		syscall.Unmount(datadir.Sandbox(stuck).Work(), syscall.MNT_DETACH)
		if res := mustRun(t, l, t0.Add(2*time.Hour)); res.Dropped != 1 {
			t.Errorf("once its files can go, the pass dropped %d, want c_stuck", res.Dropped)
		}
	}
	nobody.Also(t)
}
