package workspace_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/nobody"

	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// env is a data dir holding a secret the workspace must never reach, and
// a sandbox's workspace below it, laid out as the server lays them out.
type env struct {
	data, dir string
	ws        *workspace.Workspace
}

const secret = "the server's token"

func mustOpen(tb testing.TB, opts workspace.Options) *env {
	tb.Helper()
	data := tb.TempDir()
	dir := filepath.Join(data, "sandboxes", "c_1", "work")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "token"), []byte(secret), 0o600); err != nil {
		tb.Fatal(err)
	}
	ws, err := workspace.Open(dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Close() })
	return &env{data: data, dir: dir, ws: ws}
}

func (e *env) write(tb testing.TB, name, content string) {
	tb.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func wantType(t *testing.T, err error, typ string) {
	t.Helper()
	if got := sandbox.ErrorType(err); got != typ {
		t.Fatalf("error %v: type %s, want %s", err, got, typ)
	}
}

func readAll(t *testing.T, ws *workspace.Workspace, p string) (string, error) {
	t.Helper()
	f, err := ws.ReadFile(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

func TestPaths(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "a/b.txt", "b")
	if err := os.Symlink(e.data, filepath.Join(e.dir, "data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../..", filepath.Join(e.dir, "up")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../token", "a/../../token", "/etc/passwd", "/token", "data/token", "up/token", "data", "up/sandboxes"} {
		t.Run(p, func(t *testing.T) {
			if _, err := readAll(t, e.ws, p); sandbox.ErrorType(err) != sandbox.EInvalidRequest {
				t.Errorf("read %q: %v, want invalid_request", p, err)
			}
			if _, _, err := e.ws.WriteFile(p+"/x", strings.NewReader("x"), sandbox.WriteFileOptions{}); sandbox.ErrorType(err) != sandbox.EInvalidRequest {
				t.Errorf("write %q: %v, want invalid_request", p, err)
			}
			if _, _, err := e.ws.List(p, 10, ""); sandbox.ErrorType(err) != sandbox.EInvalidRequest {
				t.Errorf("list %q: %v, want invalid_request", p, err)
			}
			if _, err := e.ws.Archive(io.Discard, p); sandbox.ErrorType(err) != sandbox.EInvalidRequest {
				t.Errorf("archive %q: %v, want invalid_request", p, err)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(e.data, "token")); err != nil || string(b) != secret {
		t.Fatalf("the data dir's token: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(e.data, "x")); err == nil {
		t.Fatal("a write landed in the data dir")
	}
	// The link itself is the workspace's: it can be listed and removed.
	if err := e.ws.Remove("data", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.data); err != nil {
		t.Fatal("removing the link removed its target")
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.ws.ReadFile("a/missing.txt")
		wantType(t, err, sandbox.ENotFound)
	})
	t.Run("OK", func(t *testing.T) {
		for _, p := range []string{"a/b.txt", "a/./b.txt", "a/../a/b.txt"} {
			if got, err := readAll(t, e.ws, p); err != nil || got != "b" {
				t.Errorf("read %q: %q, %v", p, got, err)
			}
		}
	})
}

// TestSwappedLink: a link the agent flips between a directory of the
// workspace and the data dir, while the server reads, writes, lists,
// removes and archives through it. The server must reach the workspace's
// directory or nothing, never the data dir.
func TestSwappedLink(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "real/token", "inside")
	link := filepath.Join(e.dir, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tmp := filepath.Join(e.dir, "link.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := "real"
			if i%2 == 1 {
				target = e.data
			}
			os.Remove(tmp)
			if err := os.Symlink(target, tmp); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, link); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var inside, refused int
	for i := 0; i < 2000 || inside == 0 || refused == 0; i++ {
		if i > 20000 || t.Failed() {
			t.Fatalf("after %d rounds: %d reads inside, %d refused", i, inside, refused)
		}
		got, err := readAll(t, e.ws, "link/token")
		switch {
		case err == nil && got == "inside":
			inside++
		case err == nil:
			t.Fatalf("read through the swapped link: %q", got)
		default:
			refused++
		}
		if _, _, err := e.ws.WriteFile("link/planted", strings.NewReader("x"), sandbox.WriteFileOptions{}); err == nil {
			os.Remove(filepath.Join(e.dir, "real", "planted"))
		}
		if ents, _, err := e.ws.List("link", 10, ""); err == nil {
			for _, en := range ents {
				if en.Path == "link/sandboxes" {
					t.Fatal("listed the data dir through the swapped link")
				}
			}
		}
		if i%50 == 0 {
			var buf bytes.Buffer
			if _, err := e.ws.Archive(&buf, "link"); err == nil && bytes.Contains(buf.Bytes(), []byte("sandboxes/")) {
				t.Fatal("archived the data dir through the swapped link")
			}
		}
		_ = e.ws.Remove("link/token", false)
		e.write(t, "real/token", "inside")
	}
	close(stop)
	wg.Wait()
	if b, err := os.ReadFile(filepath.Join(e.data, "token")); err != nil || string(b) != secret {
		t.Fatalf("the data dir's token after the race: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(e.data, "planted")); err == nil {
		t.Fatal("a write landed in the data dir")
	}
}

func TestList(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "d/b.txt", "bb")
	e.write(t, "d/a.txt", "a")
	e.write(t, "d/c/x", "")
	if err := os.Symlink("/etc", filepath.Join(e.dir, "d", "l")); err != nil {
		t.Fatal(err)
	}
	var got []sandbox.FileEntry
	after := ""
	for {
		page, more, err := e.ws.List("d", 2, after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if !more {
			break
		}
		after = page[len(page)-1].Path
	}
	want := []sandbox.FileEntry{
		{Path: "d/a.txt", Type: "file", Size: 1},
		{Path: "d/b.txt", Type: "file", Size: 2},
		{Path: "d/c", Type: "dir"},
		{Path: "d/l", Type: "symlink", Size: 4},
	}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		if g.Path != want[i].Path || g.Type != want[i].Type || g.Size != want[i].Size || g.ModifiedAt.IsZero() {
			t.Errorf("entry %d: %+v, want %+v", i, g, want[i])
		}
	}
	root, _, err := e.ws.List("", 10, "")
	if err != nil || len(root) != 1 || root[0].Path != "d" {
		t.Fatalf("the root: %+v, %v", root, err)
	}
	_, _, err = e.ws.List("d/a.txt", 10, "")
	wantType(t, err, sandbox.EInvalidRequest)
	_, _, err = e.ws.List("d", 0, "")
	wantType(t, err, sandbox.EInvalidRequest)
	_, _, err = e.ws.List("nope", 10, "")
	wantType(t, err, sandbox.ENotFound)
}

func TestReadFile(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "notes.txt", "hello")
	e.write(t, "blob", "x")
	f, err := e.ws.ReadFile("notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !strings.HasPrefix(f.ContentType, "text/plain") || f.Size != 5 || !strings.HasPrefix(f.ETag, `"`) {
		t.Fatalf("opened %+v", f.FileEntry)
	}
	b, err := e.ws.ReadFile("blob")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if got, want := b.ContentType, "application/octet-stream"; got != want {
		t.Errorf("a file without an extension: %s, want %s", got, want)
	}
	if b.ETag == f.ETag {
		t.Error("two files share an ETag")
	}
	// The ETag moves with a write in place of the same size.
	e.write(t, "notes.txt", "HELLO")
	g, err := e.ws.ReadFile("notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if g.ETag == f.ETag {
		t.Error("the ETag did not change with the content")
	}
	if err := syscall.Mkfifo(filepath.Join(e.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.ws.ReadFile("fifo")
	wantType(t, err, sandbox.EInvalidRequest)
	_, err = e.ws.ReadFile("")
	wantType(t, err, sandbox.EInvalidRequest)
}

func TestWriteFile(t *testing.T) {
	owner := &workspace.Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		owner = &workspace.Owner{UID: 2000000000, GID: 2000000000}
	}
	e := mustOpen(t, workspace.Options{Owner: owner, Limits: workspace.Limits{FileMax: 10}})
	en, created, err := e.ws.WriteFile("a/b/c.txt", strings.NewReader("one"), sandbox.WriteFileOptions{})
	if err != nil || !created || en.Path != "a/b/c.txt" || en.Size != 3 || en.Type != "file" {
		t.Fatalf("first write: %+v, created %v, %v", en, created, err)
	}
	for _, p := range []string{"a", "a/b", "a/b/c.txt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(e.dir, p), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
		}
	}
	f, err := e.ws.ReadFile("a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if f.ETag != en.ETag {
		t.Fatalf("the write answered ETag %s, a read %s", en.ETag, f.ETag)
	}
	en2, created, err := e.ws.WriteFile("a/b/c.txt", strings.NewReader("two"), sandbox.WriteFileOptions{IfMatch: en.ETag})
	if err != nil || created || en2.ETag == en.ETag {
		t.Fatalf("a replace with a fresh If-Match: %+v, created %v, %v", en2, created, err)
	}
	t.Run("ErrStale", func(t *testing.T) {
		_, _, err := e.ws.WriteFile("a/b/c.txt", strings.NewReader("three"), sandbox.WriteFileOptions{IfMatch: en.ETag})
		wantType(t, err, sandbox.EPreconditionFailed)
		_, _, err = e.ws.WriteFile("a/new.txt", strings.NewReader("x"), sandbox.WriteFileOptions{IfMatch: "*"})
		wantType(t, err, sandbox.EPreconditionFailed)
		if got, _ := readAll(t, e.ws, "a/b/c.txt"); got != "two" {
			t.Fatalf("a stale write changed the file: %q", got)
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		_, _, err := e.ws.WriteFile("a/b/c.txt", strings.NewReader("0123456789X"), sandbox.WriteFileOptions{})
		wantType(t, err, sandbox.EPayloadTooLarge)
		if !strings.Contains(err.Error(), workspace.FlagFileMax) || !strings.Contains(err.Error(), "10 bytes") {
			t.Errorf("the error does not name the limit: %v", err)
		}
		if got, _ := readAll(t, e.ws, "a/b/c.txt"); got != "two" {
			t.Fatalf("a refused write changed the file: %q", got)
		}
		if _, _, err := e.ws.WriteFile("a/b/c.txt", strings.NewReader("0123456789"), sandbox.WriteFileOptions{}); err != nil {
			t.Fatalf("a write of exactly the limit: %v", err)
		}
	})
	t.Run("ErrDirectory", func(t *testing.T) {
		_, _, err := e.ws.WriteFile("a/b", strings.NewReader("x"), sandbox.WriteFileOptions{})
		wantType(t, err, sandbox.EInvalidRequest)
		_, _, err = e.ws.WriteFile("a/b/c.txt/d", strings.NewReader("x"), sandbox.WriteFileOptions{})
		wantType(t, err, sandbox.EInvalidRequest)
	})
	// No temporary file stays behind, refused or not.
	ents, err := os.ReadDir(filepath.Join(e.dir, "a", "b"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("a/b holds %v, %v", ents, err)
	}
}

func TestRemove(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "f", "x")
	e.write(t, "d/e/f", "x")
	if err := e.ws.Remove("f", false); err != nil {
		t.Fatal(err)
	}
	wantType(t, e.ws.Remove("f", false), sandbox.ENotFound)
	wantType(t, e.ws.Remove("d", false), sandbox.EConflict)
	wantType(t, e.ws.Remove("", true), sandbox.EInvalidRequest)
	if err := e.ws.Remove("d", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("d after its removal: %v", err)
	}
}

// TestRemoveReadOnly: directories an agent left without write or search
// rights (as `go mod download` leaves its cache) are removed all the
// same. Root ignores the modes, so as root the test reruns itself as
// nobody, where they matter.
func TestRemoveReadOnly(t *testing.T) {
	if nobody.Instead(t) {
		return
	}
	e := mustOpen(t, workspace.Options{})
	e.write(t, "cache/mod/a/x.go", "x")
	e.write(t, "cache/mod/b/y.go", "y")
	for _, d := range []string{"cache/mod/a", "cache/mod/b", "cache/mod", "cache"} {
		if err := os.Chmod(filepath.Join(e.dir, d), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(e.dir, "cache/mod/b"), 0o000); err != nil {
		t.Fatal(err)
	}
	// One file keeps the mode its directory has: the agent's choice.
	wantType(t, e.ws.Remove("cache/mod/a/x.go", false), sandbox.EForbidden)
	if err := e.ws.Remove("cache", true); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(e.dir); err != nil || len(ents) != 0 {
		t.Fatalf("the workspace after the removal: %v, %v", ents, err)
	}
}
