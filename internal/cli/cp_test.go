package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// cliRun is what one run of the command line printed.
type cliRun struct {
	out, err string
}

// runCLI runs the command line with stdin, against the server at url.
func runCLI(t *testing.T, url, stdin string, args ...string) (cliRun, error) {
	t.Helper()
	var out, errw bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter, app.Reader = &out, &errw, strings.NewReader(stdin)
	cmd := 1 // the words that name the command
	if args[0] == "sandbox" {
		cmd = 2
	}
	argv := append([]string{"sparkles"}, args[:cmd]...)
	argv = append(argv, "--url", url, "--token", sparklestest.DefaultToken)
	argv = append(argv, args[cmd:]...)
	err := app.Run(argv)
	return cliRun{out.String(), errw.String()}, err
}

// mustRun runs the command line and fails the test if it fails.
func mustRun(t *testing.T, url string, args ...string) cliRun {
	t.Helper()
	r, err := runCLI(t, url, "", args...)
	if err != nil {
		t.Fatalf("sparkles %s: %v\nstderr: %s", strings.Join(args, " "), err, r.err)
	}
	return r
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startSandbox starts a server with one sandbox.
func startSandbox(t *testing.T) (*sparklestest.Server, string) {
	t.Helper()
	srv := sparklestest.Start(t)
	sb, err := srv.Client.CreateSandbox(testCtx(t), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return srv, sb.ID
}

// localTree is a local directory as path → content, "dir" or "-> target".
func localTree(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			tree[rel] = "-> " + target
			return err
		case d.IsDir():
			tree[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			tree[rel] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// remoteTree is a workspace directory as localTree shows a local one
// (a link's target is not served: it shows as "-> ?").
func remoteTree(t *testing.T, c *client.Client, id, dir string) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	tree := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		for e, err := range c.AllFiles(ctx, id, dir) {
			if err != nil {
				t.Fatal(err)
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, dir), "/")
			if dir == "" {
				rel = e.Path
			}
			switch e.Type {
			case client.EntryDir:
				tree[rel] = "dir"
				sub := remoteTree(t, c, id, e.Path)
				for k, v := range sub {
					tree[rel+"/"+k] = v
				}
			case client.EntrySymlink:
				tree[rel] = "-> ?"
			default:
				body, _, err := c.ReadFile(ctx, id, e.Path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(body)
				body.Close()
				tree[rel] = string(b)
			}
		}
	}
	walk(dir)
	return tree
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries %v, want %d %v", what, len(got), got, len(want), want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCpFile(t *testing.T) {
	srv, id := startSandbox(t)
	local := t.TempDir()
	src := filepath.Join(local, "notes.txt")
	writeFile(t, src, "hello\n")

	// Local file to a path, into a directory, and under a new one.
	r := mustRun(t, srv.URL, "cp", src, id+":docs/a.txt")
	if got, want := r.err, "copied "+src+" to "+id+":docs/a.txt (6 bytes)\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	mustRun(t, srv.URL, "cp", src, id+":docs")
	mustRun(t, srv.URL, "cp", src, id+":/new/")
	sameTree(t, "workspace", remoteTree(t, srv.Client, id, ""), map[string]string{
		"docs": "dir", "docs/a.txt": "hello\n", "docs/notes.txt": "hello\n", "new": "dir", "new/notes.txt": "hello\n",
	})

	// Back out: to a new name, into a directory, to stdout.
	out := filepath.Join(local, "out.txt")
	mustRun(t, srv.URL, "cp", id+":docs/a.txt", out)
	if got := readFile(t, out); got != "hello\n" {
		t.Errorf("%s = %q", out, got)
	}
	into := filepath.Join(local, "into")
	mustRun(t, srv.URL, "cp", id+":docs/a.txt", into+"/")
	if got := readFile(t, filepath.Join(into, "a.txt")); got != "hello\n" {
		t.Errorf("into/a.txt = %q", got)
	}
	r = mustRun(t, srv.URL, "cp", id+":docs/a.txt", "-")
	if r.out != "hello\n" {
		t.Errorf("stdout = %q, want the file", r.out)
	}

	// stdin in, replacing a file; the replaced local file keeps its mode.
	if _, err := runCLI(t, srv.URL, "changed\n", "cp", "-", id+":docs/a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, srv.URL, "cp", id+":docs/a.txt", out)
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 || readFile(t, out) != "changed\n" {
		t.Errorf("replaced %s: %v, %v, %q", out, fi.Mode(), err, readFile(t, out))
	}

	// Within the workspace.
	mustRun(t, srv.URL, "cp", id+":docs/a.txt", id+":copy.txt")
	if got := remoteTree(t, srv.Client, id, "")["copy.txt"]; got != "changed\n" {
		t.Errorf("copy.txt = %q", got)
	}
}

func TestCpDirectory(t *testing.T) {
	srv, id := startSandbox(t)
	local := t.TempDir()
	src := filepath.Join(local, "proj")
	writeFile(t, filepath.Join(src, "main.go"), "package main\n")
	writeFile(t, filepath.Join(src, "dir x", "deep", "a b.txt"), "spaced\n")
	if err := os.MkdirAll(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("main.go", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	want := localTree(t, src)

	// A new name: the directory becomes it.
	mustRun(t, srv.URL, "cp", src, id+":work")
	remote := remoteTree(t, srv.Client, id, "work")
	want["link"] = "-> ?"
	sameTree(t, "work", remote, want)
	want["link"] = "-> main.go"

	// An existing directory: it goes inside, under its own name.
	back := filepath.Join(local, "back")
	if err := os.Mkdir(back, 0o755); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, srv.URL, "cp", id+":work", back)
	sameTree(t, "back/work", localTree(t, filepath.Join(back, "work")), want)
	if !strings.HasPrefix(r.err, "copied "+id+":work to "+filepath.Join(back, "work")+" (") {
		t.Errorf("stderr = %q", r.err)
	}

	// SRC/. copies what it holds; a new local name becomes the directory.
	mustRun(t, srv.URL, "cp", id+":work/.", back)
	sameTree(t, "back (contents)", localTree(t, back), func() map[string]string {
		m := map[string]string{"work": "dir"}
		for k, v := range want {
			m[k] = v
			m[filepath.Join("work", k)] = v
		}
		return m
	}())
	fresh := filepath.Join(local, "fresh")
	mustRun(t, srv.URL, "cp", id+":work/dir x", fresh)
	sameTree(t, "fresh", localTree(t, fresh), map[string]string{"deep": "dir", "deep/a b.txt": "spaced\n"})

	// An empty directory, both ways.
	mustRun(t, srv.URL, "cp", filepath.Join(src, "empty"), id+":hollow")
	if got := remoteTree(t, srv.Client, id, ""); got["hollow"] != "dir" {
		t.Errorf("hollow not made: %v", got)
	}
	mustRun(t, srv.URL, "cp", id+":hollow", filepath.Join(local, "hollow"))
	if fi, err := os.Stat(filepath.Join(local, "hollow")); err != nil || !fi.IsDir() {
		t.Errorf("local hollow: %v", err)
	}

	// To stdout as a tar.gz.
	r = mustRun(t, srv.URL, "cp", id+":work", "-")
	zr, err := gzip.NewReader(strings.NewReader(r.out))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(h.Name, "/")] = true
	}
	if !names["main.go"] || !names["dir x/deep/a b.txt"] {
		t.Errorf("tar.gz on stdout holds %v", names)
	}

	// Between two sandboxes.
	other, err := srv.Client.CreateSandbox(testCtx(t), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, srv.URL, "cp", id+":work", other.ID+":")
	want["link"] = "-> ?"
	sameTree(t, "other sandbox", remoteTree(t, srv.Client, other.ID, "work"), want)
}

func TestCpRefused(t *testing.T) {
	srv, id := startSandbox(t)
	local := t.TempDir()
	out := filepath.Join(local, "out")
	outside := filepath.Join(local, "secret")
	writeFile(t, outside, "keep")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"Local", []string{"cp", "a", "b"}, "neither"},
		{"Missing", []string{"cp", id + ":nope.txt", out}, `no file or directory "nope.txt"`},
		{"MissingLocal", []string{"cp", filepath.Join(local, "nope"), id + ":x"}, "no such file"},
		{"NoParent", []string{"cp", id + ":", filepath.Join(local, "a", "b", "c")}, ""},
		{"StdinToDir", []string{"cp", "-", id + ":dir/"}, "name the file"},
		{"LinkOut", nil, "outside"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.name == "LinkOut" {
				// The server refuses a link that leads out, and nothing of
				// the directory lands.
				dir := filepath.Join(local, "linky")
				writeFile(t, filepath.Join(dir, "ok.txt"), "ok")
				if err := os.Symlink("../../secret", filepath.Join(dir, "out")); err != nil {
					t.Fatal(err)
				}
				args = []string{"cp", dir, id + ":linky"}
			}
			if tt.name == "NoParent" {
				// Making a directory's parents is fine: it succeeds.
				mustRun(t, srv.URL, args...)
				return
			}
			_, err := runCLI(t, srv.URL, "", args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
	if got := remoteTree(t, srv.Client, id, ""); got["linky"] != "" || got["linky/ok.txt"] != "" {
		t.Errorf("a refused upload left %v", got)
	}
}

// hostileArchive is a tar.gz with one bad entry after a good one.
func hostileArchive(t *testing.T, bad tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "good.txt", Size: 2, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("ok"))
	if bad.Typeflag == tar.TypeReg {
		bad.Size = 4
	}
	if err := tw.WriteHeader(&bad); err != nil {
		t.Fatal(err)
	}
	if bad.Typeflag == tar.TypeReg {
		tw.Write([]byte("evil"))
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// TestCpHostileArchive puts the local side against a server whose
// archive tries to write outside the directory it is unpacked into.
func TestCpHostileArchive(t *testing.T) {
	for _, tt := range []struct {
		name string
		bad  tar.Header
		want string
	}{
		{"DotDot", tar.Header{Typeflag: tar.TypeReg, Name: "../evil.txt", Mode: 0o644}, `"../evil.txt" refused`},
		{"Absolute", tar.Header{Typeflag: tar.TypeReg, Name: "/tmp/evil.txt", Mode: 0o644}, "absolute"},
		{"LinkOut", tar.Header{Typeflag: tar.TypeSymlink, Name: "out", Linkname: "../../secret"}, "leads outside"},
		{"AbsoluteLink", tar.Header{Typeflag: tar.TypeSymlink, Name: "out", Linkname: "/etc"}, "absolute"},
		{"HardLinkOut", tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "../secret"}, "outside the archive"},
		{"Setuid", tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755}, "setuid"},
		{"Device", tar.Header{Typeflag: tar.TypeChar, Name: "null", Mode: 0o644}, "devices"},
		{"FIFO", tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o644}, "FIFO"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			archive := hostileArchive(t, tt.bad)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case strings.HasSuffix(r.URL.Path, "/archive"):
					w.Header().Set("Content-Type", "application/gzip")
					w.Write(archive)
				default: // the source is a directory with entries
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, `{"object":"list","data":[{"path":"d/good.txt","type":"file","size":2}],"has_more":true}`)
				}
			}))
			defer srv.Close()
			local := t.TempDir()
			writeFile(t, filepath.Join(local, "secret"), "keep")
			dst := filepath.Join(local, "a", "b")
			_, err := runCLI(t, srv.URL, "", "cp", "c_1:d", dst)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			// Nothing of the archive, not even the good entry or the
			// directory made for it, is left; nothing outside changed.
			sameTree(t, "local", localTree(t, local), map[string]string{"secret": "keep"})
		})
	}
}
