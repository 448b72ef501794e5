package workspace_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/benchtree"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// entry is one entry of a test archive.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeLink, mode: 0o644}
}

func tarOf(t testing.TB, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// listTar reads a tar.gz into name → "type:body or link".
func listTar(t testing.TB, b []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = fmt.Sprintf("%c:%s%s", h.Typeflag, body, h.Linkname)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s is recorded with an owner: %d:%d %q", h.Name, h.Uid, h.Gid, h.Uname)
		}
	}
}

// tree lists the workspace as path → "type:body or link".
func tree(t testing.TB, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			got[rel] = "2:" + l
		case d.IsDir():
			got[rel] = "5:"
		case !d.Type().IsRegular():
			got[rel] = "special"
		default:
			b, _ := os.ReadFile(p)
			got[rel] = "0:" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestArchive(t *testing.T) {
	e := mustOpen(t, workspace.Options{})
	e.write(t, "notes.txt", "hello")
	e.write(t, "src/main.go", "package main")
	os.Symlink("../notes.txt", filepath.Join(e.dir, "src", "notes"))
	os.Symlink(e.data, filepath.Join(e.dir, "out")) // archived as a link, never followed
	if err := syscall.Mkfifo(filepath.Join(e.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(e.dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var buf bytes.Buffer
	sum, err := e.ws.Archive(&buf, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"notes.txt": "0:hello", "src/": "5:", "src/main.go": "0:package main",
		"src/notes": "2:../notes.txt", "out": "2:" + e.data,
	}
	got := listTar(t, buf.Bytes())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("archived %v, want %v", got, want)
	}
	if sum.Entries != 5 || sum.Bytes != 17 || len(sum.Skipped) != 2 ||
		sum.Skipped[0].Path != "fifo" || !strings.HasPrefix(sum.Skipped[1].Reason, "socket") {
		t.Errorf("summary %+v", sum)
	}
	buf.Reset()
	if _, err := e.ws.Archive(&buf, "src"); err != nil {
		t.Fatal(err)
	}
	if got := listTar(t, buf.Bytes()); len(got) != 2 || got["main.go"] != "0:package main" {
		t.Errorf("archived src as %v", got)
	}
	_, err = e.ws.Archive(io.Discard, "notes.txt")
	wantType(t, err, sandbox.EInvalidRequest)
	_, err = e.ws.Archive(io.Discard, "missing")
	wantType(t, err, sandbox.ENotFound)

	// What one workspace archives, another unpacks to the same tree.
	os.Remove(filepath.Join(e.dir, "out"))
	buf.Reset()
	if _, err := e.ws.Archive(&buf, ""); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, workspace.Options{})
	if _, err := f.ws.Unpack(&buf, ""); err != nil {
		t.Fatal(err)
	}
	a, b := tree(t, e.dir), tree(t, f.dir)
	delete(a, "fifo")
	delete(a, "sock")
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("unpacked %v, want %v", b, a)
	}
}

func TestUnpack(t *testing.T) {
	owner := &workspace.Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		owner = &workspace.Owner{UID: 2000000000, GID: 2000000000}
	}
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			e := mustOpen(t, workspace.Options{Owner: owner})
			e.write(t, "app/old.txt", "stays")
			e.write(t, "app/a.txt", "replaced")
			body := tarOf(t, gz, dir("./"), file("a.txt", "new"), file("./lib/b.txt", "b"),
				symlink("lib/a", "../a.txt"), hardlink("lib/c.txt", "lib/b.txt"), symlink("up", "../old.txt"))
			sum, err := e.ws.Unpack(bytes.NewReader(body), "app")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"app": "5:", "app/old.txt": "0:stays", "app/a.txt": "0:new", "app/lib": "5:",
				"app/lib/b.txt": "0:b", "app/lib/a": "2:../a.txt", "app/lib/c.txt": "0:b", "app/up": "2:../old.txt",
			}
			if got := tree(t, e.dir); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("unpacked %v, want %v", got, want)
			}
			if sum.Entries != 6 || sum.Bytes != 4 {
				t.Errorf("summary %+v", sum)
			}
			for _, p := range []string{"app/a.txt", "app/lib", "app/lib/a"} {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(e.dir, p), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
					t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
				}
			}
		})
	}
}

// TestUnpackRefused: each bad archive is refused naming its first bad
// entry, and leaves the workspace as it was, staging included.
func TestUnpackRefused(t *testing.T) {
	good := file("good.txt", "fine")
	for _, tc := range []struct {
		name    string
		entries []entry
		typ     string
		say     string
	}{
		{"dotdot", []entry{good, file("../evil", "x")}, sandbox.EInvalidRequest, `"../evil"`},
		{"dotdot inside", []entry{good, file("a/../../evil", "x")}, sandbox.EInvalidRequest, `"a/../../evil"`},
		{"absolute", []entry{good, file("/etc/evil", "x")}, sandbox.EInvalidRequest, `"/etc/evil"`},
		{"symlink absolute", []entry{good, symlink("l", "/etc")}, sandbox.EInvalidRequest, `"l"`},
		{"symlink out", []entry{good, symlink("a/l", "../../..")}, sandbox.EInvalidRequest, `"a/l"`},
		{"through a link", []entry{good, symlink("l", "."), file("l/../../x", "x")}, sandbox.EInvalidRequest, `"l/../../x"`},
		{"link through a link", []entry{good, symlink("s", "."), symlink("s/up", "..")}, sandbox.EInvalidRequest, `"s/up"`},
		{"file through a link", []entry{good, dir("sub"), symlink("l", "sub"), file("l/x", "x")}, sandbox.EInvalidRequest, `"l/x"`},
		{"hard link out", []entry{good, hardlink("h", "../../token")}, sandbox.EInvalidRequest, `"h"`},
		{"hard link absolute", []entry{good, hardlink("h", "/etc/passwd")}, sandbox.EInvalidRequest, `"h"`},
		{"hard link not in the archive", []entry{good, hardlink("h", "elsewhere.txt")}, sandbox.EInvalidRequest, `"h"`},
		{"device", []entry{good, {name: "null", typ: tar.TypeChar, mode: 0o666}}, sandbox.EInvalidRequest, `"null"`},
		{"block device", []entry{good, {name: "sda", typ: tar.TypeBlock, mode: 0o666}}, sandbox.EInvalidRequest, `"sda"`},
		{"fifo", []entry{good, {name: "p", typ: tar.TypeFifo, mode: 0o666}}, sandbox.EInvalidRequest, `"p"`},
		{"setuid", []entry{good, {name: "su", typ: tar.TypeReg, mode: 0o4755}}, sandbox.EInvalidRequest, `"su"`},
		{"setgid", []entry{good, {name: "sg", typ: tar.TypeDir, mode: 0o2755}}, sandbox.EInvalidRequest, `"sg"`},
		{"file over a directory", []entry{good, file("keep", "x")}, sandbox.EConflict, `"app/keep"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustOpen(t, workspace.Options{})
			e.write(t, "app/keep/mine.txt", "mine")
			before := tree(t, e.dir)
			_, err := e.ws.Unpack(bytes.NewReader(tarOf(t, true, tc.entries...)), "app")
			wantType(t, err, tc.typ)
			if !strings.Contains(err.Error(), tc.say) {
				t.Errorf("the error does not name %s: %v", tc.say, err)
			}
			if after := tree(t, e.dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("a refused archive changed the workspace: %v, was %v", after, before)
			}
			if b, err := os.ReadFile(filepath.Join(e.data, "token")); err != nil || string(b) != secret {
				t.Fatalf("the data dir's token: %q, %v", b, err)
			}
		})
	}
	t.Run("not an archive", func(t *testing.T) {
		e := mustOpen(t, workspace.Options{})
		_, err := e.ws.Unpack(strings.NewReader("just some text, long enough to be read as a tar header, or not"), "")
		wantType(t, err, sandbox.EInvalidRequest)
		_, err = e.ws.Unpack(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}), "")
		wantType(t, err, sandbox.EInvalidRequest)
		if got := tree(t, e.dir); len(got) != 0 {
			t.Errorf("left %v", got)
		}
	})
	t.Run("target out", func(t *testing.T) {
		e := mustOpen(t, workspace.Options{})
		os.Symlink(e.data, filepath.Join(e.dir, "data"))
		_, err := e.ws.Unpack(bytes.NewReader(tarOf(t, true, good)), "data")
		wantType(t, err, sandbox.EInvalidRequest)
		_, err = e.ws.Unpack(bytes.NewReader(tarOf(t, true, good)), "../x")
		wantType(t, err, sandbox.EInvalidRequest)
		if _, err := os.Lstat(filepath.Join(e.data, "good.txt")); err == nil {
			t.Fatal("unpacked into the data dir")
		}
	})
}

func TestUnpackLimits(t *testing.T) {
	lim := workspace.Limits{FileMax: 10, ArchiveMax: 15, ArchiveEntries: 3}
	for _, tc := range []struct {
		name    string
		entries []entry
		flag    string
	}{
		{"one file", []entry{file("a", "0123456789"), file("b", "0123456789X")}, workspace.FlagFileMax},
		{"total", []entry{file("a", "0123456789"), file("b", "012345")}, workspace.FlagArchiveMax},
		{"entries", []entry{dir("d"), file("d/a", "1"), file("d/b", "2"), file("d/c", "3")}, workspace.FlagArchiveEntries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustOpen(t, workspace.Options{Limits: lim})
			_, err := e.ws.Unpack(bytes.NewReader(tarOf(t, true, tc.entries...)), "")
			wantType(t, err, sandbox.EPayloadTooLarge)
			if !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("the error does not name %s: %v", tc.flag, err)
			}
			if got := tree(t, e.dir); len(got) != 0 {
				t.Errorf("a refused archive left %v", got)
			}
			// One entry fewer is within every limit.
			if _, err := e.ws.Unpack(bytes.NewReader(tarOf(t, false, tc.entries[:len(tc.entries)-1]...)), ""); err != nil {
				t.Errorf("within the limits: %v", err)
			}
		})
	}
}

// BenchmarkArchive streams a 10,000-file, 200 MiB workspace as tar.gz.
// Target: at least 100 MiB/s (BENCHMARKS.md).
func BenchmarkArchive(b *testing.B) {
	e := mustOpen(b, workspace.Options{})
	tree := benchtree.Full
	if err := benchtree.Write(e.dir, tree); err != nil {
		b.Fatal(err)
	}
	total := int64(tree.PerFile() * tree.Files)
	b.SetBytes(total)
	b.ResetTimer()
	for b.Loop() {
		var n countWriter
		sum, err := e.ws.Archive(&n, "")
		if err != nil {
			b.Fatal(err)
		}
		if sum.Bytes != total {
			b.Fatalf("archived %d bytes, want %d", sum.Bytes, total)
		}
		b.ReportMetric(float64(sum.Bytes)/float64(n), "ratio")
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
