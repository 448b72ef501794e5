package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/nobody"
	"github.com/sparkles-dev/sparkles/internal/snapshot"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var ctx = context.Background()

// turn writes a before and an after state covering every kind of change.
func turn(w *workspace) (before, after snapshot.ID) {
	w.write("keep.txt", "unchanged\n", 0o644)
	w.write("edit.txt", "one\ntwo\nthree\n", 0o644)
	w.write("gone.txt", "to be deleted\n", 0o644)
	w.write("run.sh", "#!/bin/sh\necho hi\n", 0o644)
	w.write("deep/er/nested.go", "package nested\n", 0o644)
	w.write("bin.dat", "\x00\x01\x02binary", 0o644)
	w.symlink("keep.txt", "link")
	before = w.take()

	w.write("edit.txt", "one\n2\nthree\n", 0o644)
	w.remove("gone.txt")
	w.write("run.sh", "#!/bin/sh\necho hi\n", 0o755)
	w.write("deep/er/new.go", "package nested\n\nfunc New() {}\n", 0o644)
	w.write("bin.dat", "\x00\x01\x02binary, changed", 0o644)
	w.remove("link")
	w.symlink("edit.txt", "link")
	w.write("added dir/with space.txt", "hello\n", 0o600)
	after = w.take()
	return before, after
}

func TestChanges(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	before, after := turn(w)
	got, err := w.store.Changes(ctx, before, after)
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot.Changes{Added: 2, Modified: 4, Deleted: 1, Files: []snapshot.FileChange{
		{Path: "added dir/with space.txt", Change: "added"},
		{Path: "bin.dat", Change: "modified"},
		{Path: "deep/er/new.go", Change: "added"},
		{Path: "edit.txt", Change: "modified"},
		{Path: "gone.txt", Change: "deleted"},
		{Path: "link", Change: "modified"},
		{Path: "run.sh", Change: "modified"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes:\n got %+v\nwant %+v", got, want)
	}

	t.Run("Unchanged", func(t *testing.T) {
		again := w.take()
		got, err := w.store.Changes(ctx, after, again)
		if err != nil {
			t.Fatal(err)
		}
		if got.Added+got.Modified+got.Deleted != 0 || len(got.Files) != 0 {
			t.Fatalf("changes of an unchanged workspace: %+v", got)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := w.store.Changes(ctx, before, snapshot.ID(strings.Repeat("ab", 20)))
		if got, want := sandbox.ErrorType(err), sandbox.ENotFound; got != want {
			t.Fatalf("error %v: type %q, want %q", err, got, want)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, err := w.store.Changes(ctx, "../HEAD", after)
		if got, want := sandbox.ErrorType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("error %v: type %q, want %q", err, got, want)
		}
	})
}

func TestDiff(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	before, after := turn(w)
	var b bytes.Buffer
	if err := w.store.Diff(ctx, before, after, &b); err != nil {
		t.Fatal(err)
	}
	d := b.String()
	for _, want := range []string{
		"diff --git a/edit.txt b/edit.txt\n",
		"--- a/edit.txt\n+++ b/edit.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n",
		"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
		"Binary files a/bin.dat and b/bin.dat differ\n",
		"deleted file mode 100644\n",
		"--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-to be deleted\n",
		"+++ b/deep/er/new.go\n@@ -0,0 +1,3 @@\n+package nested\n+\n+func New() {}\n",
		"--- a/link\n+++ b/link\n@@ -1 +1 @@\n-keep.txt\n\\ No newline at end of file\n+edit.txt\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q; diff:\n%s", want, d)
		}
	}
	if strings.Contains(d, "binary, changed") {
		t.Errorf("binary content diffed:\n%s", d)
	}
	if strings.Contains(d, "keep.txt\n+++") || strings.Contains(d, "nested.go") {
		t.Errorf("diff names unchanged files:\n%s", d)
	}
}

func TestRestore(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	before, after := turn(w)
	afterTree := tree(t, w.work)
	if err := w.store.Restore(ctx, after); err != nil { // a no-op
		t.Fatal(err)
	}
	if got := tree(t, w.work); got != afterTree {
		t.Fatalf("restore to the current snapshot changed the workspace:\n%s\nwant\n%s", got, afterTree)
	}

	// What the turn started from, rebuilt by hand on a second workspace.
	ref := mustOpen(t, snapshot.Options{})
	ref.write("keep.txt", "unchanged\n", 0o644)
	ref.write("edit.txt", "one\ntwo\nthree\n", 0o644)
	ref.write("gone.txt", "to be deleted\n", 0o644)
	ref.write("run.sh", "#!/bin/sh\necho hi\n", 0o644)
	ref.write("deep/er/nested.go", "package nested\n", 0o644)
	ref.write("bin.dat", "\x00\x01\x02binary", 0o644)
	ref.symlink("keep.txt", "link")

	if err := w.store.Restore(ctx, before); err != nil {
		t.Fatal(err)
	}
	if got, want := tree(t, w.work), tree(t, ref.work); got != want {
		t.Fatalf("restored workspace:\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(w.path("added dir")); !os.IsNotExist(err) {
		t.Errorf("the directory the turn added is still there: %v", err)
	}

	// And forward again: a revert can itself be reverted.
	if err := w.store.Restore(ctx, after); err != nil {
		t.Fatal(err)
	}
	// The restored file's mode is the snapshot's (0644), not the 0600 it
	// was written with: snapshots keep the executable bit only, as git.
	want := strings.Replace(afterTree, "added dir/with space.txt file 600", "added dir/with space.txt file 644", 1)
	if got := tree(t, w.work); got != want {
		t.Fatalf("workspace restored forward:\n%s\nwant\n%s", got, want)
	}
}

func TestRestoreTypeChanges(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	w.write("was-file", "file\n", 0o644)
	w.write("was-dir/a", "a\n", 0o644)
	before := w.take()
	want := tree(t, w.work)

	w.remove("was-file")
	w.write("was-file/inside", "now a dir\n", 0o644)
	w.remove("was-dir")
	w.write("was-dir", "now a file\n", 0o644)
	w.take()

	if err := w.store.Restore(ctx, before); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, w.work); got != want {
		t.Fatalf("restored:\n%s\nwant\n%s", got, want)
	}
}

// An agent plants links pointing outside the workspace where the
// snapshot had a file and a directory: Restore replaces the links and
// writes nothing outside.
func TestRestoreOutwardSymlink(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.write("notes.txt", "mine\n", 0o644)
	w.write("dir/file", "in dir\n", 0o644)
	w.write("deleted/x", "x\n", 0o644)
	before := w.take()
	want := tree(t, w.work)
	outsideTree := exactTree(t, outside)

	w.remove("notes.txt")
	w.symlink(secret, "notes.txt")
	w.remove("dir")
	w.symlink(filepath.Join(outside, "dir"), "dir")
	w.remove("deleted")
	w.symlink(outside, "deleted")

	if err := w.store.Restore(ctx, before); err != nil {
		t.Fatal(err)
	}
	if got := exactTree(t, outside); got != outsideTree {
		t.Fatalf("restore wrote outside the workspace:\n%s\nwant\n%s", got, outsideTree)
	}
	if got := tree(t, w.work); got != want {
		t.Fatalf("restored:\n%s\nwant\n%s", got, want)
	}
}

// A workspace cloned from a user's repository: its .git (and a nested
// one) is never recorded, never written, and none of its hooks run.
func TestGitWorkspace(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	marker := filepath.Join(t.TempDir(), "hook-ran")
	hook := fmt.Sprintf("#!/bin/sh\ntouch %s\n", marker)
	for _, g := range []string{".git", "vendor/lib/.git"} {
		w.write(g+"/HEAD", "ref: refs/heads/main\n", 0o644)
		w.write(g+"/config", "[core]\n\tbare = false\n[filter \"lfs\"]\n\tclean = touch "+marker+"\n", 0o644)
		w.write(g+"/index", "DIRC\x00\x00\x00\x02", 0o644)
		w.write(g+"/refs/heads/main", "0123456789012345678901234567890123456789\n", 0o644)
		for _, h := range []string{"pre-commit", "post-checkout", "post-commit", "reference-transaction"} {
			w.write(g+"/hooks/"+h, hook, 0o755)
		}
	}
	w.write(".gitattributes", "* filter=lfs\n", 0o644)
	w.write("main.go", "package main\n", 0o644)
	w.write("vendor/lib/lib.go", "package lib\n", 0o644)
	gitBefore := exactTree(t, w.path(".git"))
	nestedBefore := exactTree(t, w.path("vendor/lib/.git"))

	before := w.take()
	w.write("main.go", "package main\n\nfunc main() {}\n", 0o644)
	w.write(".git/hooks/pre-commit", hook+"# edited during the turn\n", 0o755)
	gitDuring := exactTree(t, w.path(".git"))
	after := w.take()

	ch, err := w.store.Changes(ctx, before, after)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ch.Files, []snapshot.FileChange{{Path: "main.go", Change: "modified"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("changes %+v, want %+v", got, want)
	}
	var d bytes.Buffer
	if err := w.store.Diff(ctx, before, after, &d); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.String(), ".git/") {
		t.Errorf("diff shows .git:\n%s", d.String())
	}
	if err := w.store.Restore(ctx, before); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(w.path("main.go")); string(got) != "package main\n" {
		t.Errorf("main.go restored as %q", got)
	}
	if got := exactTree(t, w.path(".git")); got != gitDuring {
		t.Errorf(".git changed by restore:\n%s\nwant\n%s", got, gitDuring)
	}
	if got := exactTree(t, w.path("vendor/lib/.git")); got != nestedBefore {
		t.Errorf("nested .git changed:\n%s\nwant\n%s", got, nestedBefore)
	}
	if gitDuring == gitBefore {
		t.Fatal("the test's own edit of .git did not happen")
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a hook or filter of the workspace's repository ran: %v", err)
	}
}

func TestTruncation(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	before := w.take() // an empty workspace is a snapshot too
	for i := range 1200 {
		w.write(fmt.Sprintf("d%d/f%04d", i%7, i), fmt.Sprint(i), 0o644)
	}
	after := w.take()
	ch, err := w.store.Changes(ctx, before, after)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Added != 1200 || len(ch.Files) != snapshot.MaxListed || !ch.Truncated {
		t.Fatalf("added %d, listed %d, truncated %v; want 1200, %d, true", ch.Added, len(ch.Files), ch.Truncated, snapshot.MaxListed)
	}
	if got, want := ch.Files[0].Path, "d0/f0000"; got != want {
		t.Errorf("first file %q, want %q (sorted by path)", got, want)
	}
	back, err := w.store.Changes(ctx, after, before)
	if err != nil {
		t.Fatal(err)
	}
	if back.Deleted != 1200 || !back.Truncated {
		t.Errorf("reverse: deleted %d, truncated %v", back.Deleted, back.Truncated)
	}
}

// A file over the size limit is recorded by size and hash: its changes
// are counted and named in the diff, and Restore leaves it alone.
func TestLargeFile(t *testing.T) {
	w := mustOpen(t, snapshot.Options{MaxFileSize: 16})
	w.write("big.log", strings.Repeat("x", 100), 0o644)
	w.write("small.txt", "small\n", 0o644)
	a := w.take()
	b := w.take()
	if ch, _ := w.store.Changes(ctx, a, b); len(ch.Files) != 0 {
		t.Errorf("unchanged large file listed: %+v", ch)
	}
	w.write("big.log", strings.Repeat("y", 100), 0o644)
	w.write("huge.bin", strings.Repeat("z", 200), 0o644)
	w.write("small.txt", strings.Repeat("grown past the limit ", 3), 0o644)
	c := w.take()
	ch, err := w.store.Changes(ctx, b, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.FileChange{{Path: "big.log", Change: "modified"}, {Path: "huge.bin", Change: "added"}, {Path: "small.txt", Change: "modified"}}
	if !reflect.DeepEqual(ch.Files, want) {
		t.Fatalf("changes %+v, want %+v", ch.Files, want)
	}
	var d bytes.Buffer
	if err := w.store.Diff(ctx, b, c, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.String(), "File big.log not stored (larger than the limit: 100 bytes, then larger than the limit: 100 bytes), not diffed") {
		t.Errorf("diff does not name the large file:\n%s", d.String())
	}
	if err := w.store.Restore(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(w.path("big.log")); string(got) != strings.Repeat("y", 100) {
		t.Errorf("large file rewritten: %.10q…", got)
	}
	if _, err := os.Stat(w.path("huge.bin")); !os.IsNotExist(err) {
		t.Errorf("large file added since the snapshot kept: %v", err)
	}
	if got, _ := os.ReadFile(w.path("small.txt")); string(got) != "small\n" {
		t.Errorf("small.txt restored as %q", got)
	}
}

// A same-size rewrite with its mtime set back is still seen: the stat
// cache compares ctime too.
func TestMtimeSetBack(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	old := time.Now().Add(-time.Hour)
	w.write("a.txt", "aaaa", 0o644)
	if err := os.Chtimes(w.path("a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	a := w.take()
	w.write("a.txt", "bbbb", 0o644)
	if err := os.Chtimes(w.path("a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	b := w.take()
	ch, err := w.store.Changes(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ch.Files, []snapshot.FileChange{{Path: "a.txt", Change: "modified"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
}

// Snapshots outlive the Store value: a server restart keeps every turn's
// diff and revert.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	st, err := snapshot.Open(filepath.Join(dir, "snapshots"), work, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "f"), []byte("1"), 0o644)
	a, _ := st.Take(ctx)
	os.WriteFile(filepath.Join(work, "f"), []byte("2"), 0o644)
	b, _ := st.Take(ctx)
	st.Close()
	st, err = snapshot.Open(filepath.Join(dir, "snapshots"), work, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ch, err := st.Changes(ctx, a, b)
	if err != nil || ch.Modified != 1 {
		t.Fatalf("changes after reopen: %+v, %v", ch, err)
	}

	if _, err := snapshot.Open(filepath.Join(work, "snapshots"), work, snapshot.Options{}); err == nil {
		t.Error("a store inside the workspace was accepted")
	}
}

// Restored files and the directories made for them belong to the owner
// given (the agent's uid when the server is root). As nobody the owner is
// nobody itself, and a file nobody cannot read is noted, not fatal.
func TestOwner(t *testing.T) {
	owner := snapshot.Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		owner = snapshot.Owner{UID: 2000000000, GID: 2000000000}
	}
	w := mustOpen(t, snapshot.Options{Owner: &owner})
	w.write("sub/dir/f.txt", "f\n", 0o644)
	w.write("tool", "#!/bin/sh\n", 0o755)
	w.symlink("tool", "link")
	a := w.take()
	w.remove("sub")
	w.remove("tool")
	w.remove("link")
	w.write("secret", "no read\n", 0o000)
	b := w.take()
	ch, err := w.store.Changes(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Added != 1 || ch.Deleted != 3 {
		t.Errorf("changes %+v, want 1 added (the unreadable file), 3 deleted", ch)
	}
	if err := w.store.Restore(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sub", "sub/dir", "sub/dir/f.txt", "tool", "link"} {
		fi, err := os.Lstat(w.path(p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
		}
	}
	if fi, _ := os.Stat(w.path("tool")); fi.Mode().Perm() != 0o755 {
		t.Errorf("tool restored with mode %v", fi.Mode())
	}
	if _, err := os.Lstat(w.path("secret")); !os.IsNotExist(err) {
		t.Errorf("the file added since the snapshot is still there: %v", err)
	}
	nobody.Also(t)
}

// A link to a directory outside is recorded as a link: nothing behind it
// is read into the store, where a diff or a revert would hand it over.
func TestTakeDoesNotFollowLinks(t *testing.T) {
	w := mustOpen(t, snapshot.Options{})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := w.take()
	w.symlink(outside, "escape")
	w.symlink(filepath.Join(outside, "secret"), "secret-link")
	b := w.take()
	ch, err := w.store.Changes(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ch.Files, []snapshot.FileChange{{Path: "escape", Change: "added"}, {Path: "secret-link", Change: "added"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	var d bytes.Buffer
	if err := w.store.Diff(ctx, a, b, &d); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.String(), "outside\n") || !strings.Contains(d.String(), "new file mode 120000") {
		t.Fatalf("diff:\n%s", d.String())
	}
}

// TestMarks: a mark names a snapshot across reopening the store; an
// unknown mark is not_found; bad names and ids are refused.
func TestMarks(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	s, err := snapshot.Open(dir, work, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Mark("turn_1/start", id); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = snapshot.Open(dir, work, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Marked("turn_1/start"); err != nil || got != id {
		t.Fatalf("Marked = %q, %v; want %q", got, err, id)
	}
	if _, err := s.Marked("turn_2/start"); !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("unknown mark: %v, want not_found", err)
	}
	for _, bad := range []string{"", "../x", "a//b", "/a", "a/", "a b", "a\x00"} {
		if err := s.Mark(bad, id); err == nil {
			t.Fatalf("Mark(%q) took a bad name", bad)
		}
	}
	if err := s.Mark("turn_1/end", "nothex"); err == nil {
		t.Fatal("Mark took a bad id")
	}
}
