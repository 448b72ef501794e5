package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/snapshot"
)

// workspace is a sandbox's layout: the workspace and, beside it, the
// store the agent never sees.
type workspace struct {
	tb    testing.TB
	work  string
	store *snapshot.Store
}

func mustOpen(tb testing.TB, opts snapshot.Options) *workspace {
	tb.Helper()
	dir := tb.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		tb.Fatal(err)
	}
	st, err := snapshot.Open(filepath.Join(dir, "snapshots"), work, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return &workspace{tb: tb, work: work, store: st}
}

func (w *workspace) path(p string) string { return filepath.Join(w.work, filepath.FromSlash(p)) }

func (w *workspace) write(p, content string, perm os.FileMode) {
	w.tb.Helper()
	full := w.path(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		w.tb.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), perm); err != nil {
		w.tb.Fatal(err)
	}
	if err := os.Chmod(full, perm); err != nil {
		w.tb.Fatal(err)
	}
}

func (w *workspace) symlink(target, p string) {
	w.tb.Helper()
	if err := os.Symlink(target, w.path(p)); err != nil {
		w.tb.Fatal(err)
	}
}

func (w *workspace) remove(p string) {
	w.tb.Helper()
	if err := os.RemoveAll(w.path(p)); err != nil {
		w.tb.Fatal(err)
	}
}

func (w *workspace) take() snapshot.ID {
	w.tb.Helper()
	id, err := w.store.Take(context.Background())
	if err != nil {
		w.tb.Fatal(err)
	}
	return id
}

// tree describes every entry under dir, .git included: type, mode bits,
// content or link target. Two equal trees are the same workspace.
func tree(tb testing.TB, dir string) string {
	tb.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s link %s", rel, t))
		case d.IsDir():
			lines = append(lines, fmt.Sprintf("%s dir", rel))
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			lines = append(lines, fmt.Sprintf("%s file %o %s", rel, fi.Mode().Perm(), hex.EncodeToString(sum[:8])))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// exactTree is tree plus every file's modification time: a .git that must
// stay byte-identical must also stay untouched.
func exactTree(tb testing.TB, dir string) string {
	tb.Helper()
	var b strings.Builder
	b.WriteString(tree(tb, dir))
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if fi, err := os.Lstat(p); err == nil {
			fmt.Fprintf(&b, "\n%s %d", p, fi.ModTime().UnixNano())
		}
		return nil
	})
	return b.String()
}
