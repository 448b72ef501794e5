package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// filesHarness is a server whose coordinator keeps workspaces under a
// temporary data dir.
func filesHarness(t *testing.T, tweak func(*coordinator.Config)) (*harness, string) {
	t.Helper()
	dir := t.TempDir()
	h := newHarness(t, options{coord: func(c *coordinator.Config) {
		c.DataDir = dir
		if tweak != nil {
			tweak(c)
		}
	}})
	return h, dir
}

// raw sends a request with the server token and a raw body, and answers
// the response with its body read.
func (h *harness) raw(method, path string, body []byte, header ...string) (*http.Response, []byte) {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.url+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// errorOf checks that an answer is the error of status and type.
func errorOf(t *testing.T, resp *http.Response, body []byte, status int, typ string) string {
	t.Helper()
	return response{status: resp.StatusCode, header: resp.Header, body: body}.fails(t, status, typ).Error.Message
}

func TestFiles(t *testing.T) {
	h, dir := filesHarness(t, nil)
	sb := h.createSandbox()
	base := "/v1/sandboxes/" + sb.ID
	work := datadir.Dir(dir).Sandbox(sb.ID).Work()

	resp, body := h.raw("PUT", base+"/files/src/main.go", []byte("package main\n"))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT new: %d %s", resp.StatusCode, body)
	}
	var e sandbox.FileEntry
	if err := json.Unmarshal(body, &e); err != nil || e.Path != "src/main.go" || e.Type != "file" || e.Size != 13 {
		t.Fatalf("PUT answer %s (%v)", body, err)
	}
	etag := resp.Header.Get("ETag")
	if got, err := os.ReadFile(filepath.Join(work, "src", "main.go")); err != nil || string(got) != "package main\n" {
		t.Fatalf("file on disk = %q, %v", got, err)
	}

	t.Run("Get", func(t *testing.T) {
		resp, body := h.raw("GET", base+"/files/src/main.go", nil)
		if resp.StatusCode != 200 || string(body) != "package main\n" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
		for k, want := range map[string]string{
			"ETag": etag, "Content-Length": "13", "X-Content-Type-Options": "nosniff",
			"Content-Security-Policy": "sandbox", "Accept-Ranges": "bytes",
		} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
		resp, body = h.raw("GET", base+"/files/src/main.go", nil, "Range", "bytes=0-6")
		if resp.StatusCode != http.StatusPartialContent || string(body) != "package" {
			t.Fatalf("Range: %d %q", resp.StatusCode, body)
		}
		resp, _ = h.raw("GET", base+"/files/src/main.go", nil, "If-None-Match", etag)
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("If-None-Match: %d", resp.StatusCode)
		}
		resp, _ = h.raw("GET", base+"/files/src/main.go?download=1", nil)
		if got := resp.Header.Get("Content-Disposition"); got != `attachment; filename=main.go` {
			t.Fatalf("Content-Disposition = %q", got)
		}
		os.WriteFile(filepath.Join(work, "page.html"), []byte("<script>alert(1)</script>"), 0o644)
		resp, _ = h.raw("GET", base+"/files/page.html", nil)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") || resp.Header.Get("Content-Security-Policy") != "sandbox" {
			t.Fatalf("an HTML file: Content-Type %q, CSP %q", ct, resp.Header.Get("Content-Security-Policy"))
		}
	})

	t.Run("Replace", func(t *testing.T) {
		resp, body := h.raw("PUT", base+"/files/src/main.go", []byte("package other\n"), "If-Match", `"0000"`)
		errorOf(t, resp, body, http.StatusPreconditionFailed, sandbox.EPreconditionFailed)
		resp, body = h.raw("PUT", base+"/files/src/main.go", []byte("package other\n"), "If-None-Match", "*")
		errorOf(t, resp, body, http.StatusPreconditionFailed, sandbox.EPreconditionFailed)
		resp, body = h.raw("PUT", base+"/files/src/main.go", []byte("package main // 2\n"), "If-Match", etag)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT with the current ETag: %d %s", resp.StatusCode, body)
		}
		// The ETag it answered is now stale for the one before.
		resp, body = h.raw("PUT", base+"/files/src/main.go", []byte("x"), "If-Match", etag)
		errorOf(t, resp, body, http.StatusPreconditionFailed, sandbox.EPreconditionFailed)
	})

	t.Run("List", func(t *testing.T) {
		for _, n := range []string{"b.txt", "a.txt", "c.txt"} {
			if resp, body := h.raw("PUT", base+"/files/list/"+n, []byte(n)); resp.StatusCode != http.StatusCreated {
				t.Fatalf("PUT %s: %d %s", n, resp.StatusCode, body)
			}
		}
		var page fileList
		h.ok("GET", base+"/files/list?limit=2", nil, http.StatusOK, &page)
		if len(page.Data) != 2 || !page.HasMore || page.Data[0].Path != "list/a.txt" || page.Data[1].Path != "list/b.txt" {
			t.Fatalf("first page %+v", page)
		}
		h.ok("GET", base+"/files/list?limit=2&after=list/b.txt", nil, http.StatusOK, &page)
		if len(page.Data) != 1 || page.HasMore || page.Data[0].Path != "list/c.txt" {
			t.Fatalf("second page %+v", page)
		}
		h.ok("GET", base+"/files", nil, http.StatusOK, &page)
		var names []string
		for _, e := range page.Data {
			names = append(names, e.Path+":"+e.Type)
		}
		if got := strings.Join(names, " "); got != "list:dir page.html:file src:dir" {
			t.Fatalf("root listing %s", got)
		}
		h.request("GET", base+"/files/list?limit=0", h.token, nil).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
	})

	t.Run("Escapes", func(t *testing.T) {
		// The data dir, where the token and the database are.
		if err := os.Symlink(dir, filepath.Join(work, "out")); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret"), 0o600)
		for _, p := range []string{
			"/files/%2e%2e/%2e%2e/secret.txt", "/files/src/%2e%2e/%2e%2e/x", "/files/%2Fetc%2Fpasswd", "/files//etc/passwd",
			"/files/out/secret.txt", "/files/out",
		} {
			resp, body := h.raw("GET", base+p, nil)
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("GET %s answered 200: %q", p, body)
			}
			if strings.Contains(string(body), "secret") && !strings.Contains(string(body), "secret.txt") {
				t.Fatalf("GET %s leaked: %s", p, body)
			}
		}
		resp, body := h.raw("PUT", base+"/files/out/planted.txt", []byte("x"))
		errorOf(t, resp, body, http.StatusBadRequest, sandbox.EInvalidRequest)
		if _, err := os.Stat(filepath.Join(dir, "planted.txt")); !os.IsNotExist(err) {
			t.Fatalf("a write through a link reached the data dir: %v", err)
		}
		resp, body = h.raw("DELETE", base+"/files/out/secret.txt", nil)
		errorOf(t, resp, body, http.StatusBadRequest, sandbox.EInvalidRequest)
		if _, err := os.Stat(filepath.Join(dir, "secret.txt")); err != nil {
			t.Fatalf("a delete through a link reached the data dir: %v", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		h.request("DELETE", base+"/files/list", h.token, nil).fails(t, http.StatusConflict, sandbox.EConflict)
		var del fileDeleted
		h.ok("DELETE", base+"/files/list?recursive=true", nil, http.StatusOK, &del)
		if del.Path != "list" || !del.Deleted {
			t.Fatalf("delete answer %+v", del)
		}
		h.request("DELETE", base+"/files/list", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
		h.request("GET", base+"/files/list", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})

	t.Run("StreamTokenForbidden", func(t *testing.T) {
		for _, r := range [][2]string{{"GET", "/files"}, {"GET", "/files/src/main.go"}, {"PUT", "/files/x"}, {"DELETE", "/files/src/main.go"},
			{"GET", "/archive"}, {"PUT", "/archive"}, {"GET", "/turns/turn_x/diff"}, {"POST", "/turns/turn_x/revert"}} {
			h.request(r[0], base+r[1], sb.StreamToken, nil).fails(t, http.StatusForbidden, sandbox.EForbidden)
		}
		h.request("GET", base+"/files", "", nil).fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
	})
}

// tarOf makes a tar (gzipped when gz) of entries.
func tarOf(t *testing.T, gz bool, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, h := range entries {
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		body := []byte(h.Name)
		if h.Size > 0 {
			body = bytes.Repeat([]byte("z"), int(h.Size))
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// untar lists a tar.gz's entries as "name:type".
func untar(t *testing.T, b []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name+":"+string(h.Typeflag))
	}
	sort.Strings(out)
	return out
}

func TestArchive(t *testing.T) {
	h, dir := filesHarness(t, nil)
	sb := h.createSandbox()
	base := "/v1/sandboxes/" + sb.ID
	work := datadir.Dir(dir).Sandbox(sb.ID).Work()

	for _, gz := range []bool{false, true} {
		var sum sandbox.ArchiveSummary
		resp, body := h.raw("PUT", base+"/archive?path=up", tarOf(t, gz, &tar.Header{Name: "a.txt"}, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/b.txt"}))
		if resp.StatusCode != 200 || json.Unmarshal(body, &sum) != nil || sum.Entries != 3 {
			t.Fatalf("PUT archive (gzip %v): %d %s", gz, resp.StatusCode, body)
		}
	}
	if b, err := os.ReadFile(filepath.Join(work, "up", "d", "b.txt")); err != nil || string(b) != "d/b.txt" {
		t.Fatalf("unpacked file = %q, %v", b, err)
	}

	resp, body := h.raw("GET", base+"/archive", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/gzip" {
		t.Fatalf("GET archive: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := resp.Header.Get("Content-Disposition"); got != "attachment; filename="+sb.ID+".tar.gz" {
		t.Fatalf("Content-Disposition = %q", got)
	}
	if got := strings.Join(untar(t, body), " "); got != "up/:5 up/a.txt:0 up/d/:5 up/d/b.txt:0" {
		t.Fatalf("archive entries %s", got)
	}
	resp, body = h.raw("GET", base+"/archive?path=up/d", nil)
	if got := strings.Join(untar(t, body), " "); got != "b.txt:0" || !strings.Contains(resp.Header.Get("Content-Disposition"), sb.ID+"-d.tar.gz") {
		t.Fatalf("archive of a dir: %s (%s)", got, resp.Header.Get("Content-Disposition"))
	}
	resp, body = h.raw("GET", base+"/archive?path=up/a.txt", nil)
	errorOf(t, resp, body, http.StatusBadRequest, sandbox.EInvalidRequest)

	t.Run("Refused", func(t *testing.T) {
		for name, bad := range map[string]*tar.Header{
			"dotdot":    {Name: "../evil.txt"},
			"absolute":  {Name: "/tmp/evil.txt"},
			"linkOut":   {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../../.."},
			"absLink":   {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
			"hardOut":   {Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"},
			"device":    {Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
			"fifo":      {Name: "fifo", Typeflag: tar.TypeFifo},
			"setuid":    {Name: "suid", Mode: 0o4755},
			"setgid":    {Name: "sgid", Mode: 0o2755},
			"throughIt": {Name: "l2/x.txt"},
		} {
			t.Run(name, func(t *testing.T) {
				entries := []*tar.Header{{Name: "first-" + name + ".txt"}, bad}
				if name == "throughIt" {
					entries = []*tar.Header{{Name: "first-" + name + ".txt"}, {Name: "l2", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, bad}
				}
				resp, body := h.raw("PUT", base+"/archive?path=bad", tarOf(t, true, entries...))
				msg := errorOf(t, resp, body, http.StatusBadRequest, sandbox.EInvalidRequest)
				if !strings.Contains(msg, strings.TrimSuffix(entries[len(entries)-1].Name, "/")) && name != "throughIt" {
					t.Fatalf("message %q names no entry", msg)
				}
				if _, err := os.Stat(filepath.Join(work, "bad", "first-"+name+".txt")); !os.IsNotExist(err) {
					t.Fatalf("a refused upload left its first entry behind: %v", err)
				}
			})
		}
		if _, err := os.Stat(filepath.Join(datadir.Dir(dir).Sandboxes(), "evil.txt")); !os.IsNotExist(err) {
			t.Fatal("an entry landed outside the workspace")
		}
	})
}

func TestFileLimits(t *testing.T) {
	h, _ := filesHarness(t, func(c *coordinator.Config) {
		c.FileLimits = workspace.Limits{FileMax: 1 << 10, ArchiveEntries: 3}
	})
	sb := h.createSandbox()
	base := "/v1/sandboxes/" + sb.ID
	resp, body := h.raw("PUT", base+"/files/big.bin", bytes.Repeat([]byte("x"), 2<<10))
	if msg := errorOf(t, resp, body, http.StatusRequestEntityTooLarge, sandbox.EPayloadTooLarge); !strings.Contains(msg, "--files-max-size") {
		t.Fatalf("413 message %q names no flag", msg)
	}
	entries := []*tar.Header{{Name: "1"}, {Name: "2"}, {Name: "3"}, {Name: "4"}}
	resp, body = h.raw("PUT", base+"/archive", tarOf(t, true, entries...))
	if msg := errorOf(t, resp, body, http.StatusRequestEntityTooLarge, sandbox.EPayloadTooLarge); !strings.Contains(msg, "--archive-max-entries") {
		t.Fatalf("413 message %q names no flag", msg)
	}
	var page fileList
	h.ok("GET", base+"/files", nil, http.StatusOK, &page)
	if len(page.Data) != 0 {
		t.Fatalf("refused uploads left %+v", page.Data)
	}
}

// TestFilesDiskLimit: an upload past the sandbox's disk limit answers 507
// naming the flag, and writes nothing.
func TestFilesDiskLimit(t *testing.T) {
	h, _ := filesHarness(t, func(c *coordinator.Config) { c.SandboxDiskMax = 64 << 10 })
	sb := h.createSandbox()
	base := "/v1/sandboxes/" + sb.ID
	if resp, body := h.raw("PUT", base+"/files/a.bin", bytes.Repeat([]byte("a"), 40<<10)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first write: %d %s", resp.StatusCode, body)
	}
	resp, body := h.raw("PUT", base+"/files/b.bin", bytes.Repeat([]byte("b"), 40<<10))
	if msg := errorOf(t, resp, body, http.StatusInsufficientStorage, sandbox.EInsufficientStorage); !strings.Contains(msg, "--sandbox-disk-max") {
		t.Fatalf("507 message %q names no flag", msg)
	}
	// Compressed, the archive is small: its unpacked bytes pass the limit.
	resp, body = h.raw("PUT", base+"/archive", tarOf(t, true, &tar.Header{Name: "c.bin", Size: 40 << 10}))
	errorOf(t, resp, body, http.StatusInsufficientStorage, sandbox.EInsufficientStorage)
	h.request("GET", base+"/files/c.bin", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	h.request("GET", base+"/files/b.bin", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
}

// TestFilesDiskReserve: an upload that would leave less free space under
// the data dir than --disk-reserve answers 507 naming it, and writes
// nothing; the event log still takes writes.
func TestFilesDiskReserve(t *testing.T) {
	h, _ := filesHarness(t, func(c *coordinator.Config) { c.DiskReserve = 1 << 60 }) // more than any disk has
	sb := h.createSandbox()
	base := "/v1/sandboxes/" + sb.ID
	resp, body := h.raw("PUT", base+"/files/a.txt", []byte("a"))
	if msg := errorOf(t, resp, body, http.StatusInsufficientStorage, sandbox.EInsufficientStorage); !strings.Contains(msg, "--disk-reserve") {
		t.Fatalf("507 message %q names no flag", msg)
	}
	resp, body = h.raw("PUT", base+"/archive", tarOf(t, false, &tar.Header{Name: "b.txt"}))
	errorOf(t, resp, body, http.StatusInsufficientStorage, sandbox.EInsufficientStorage)
	h.request("GET", base+"/files/a.txt", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	h.appendMessages(sb.ID, 1, 10)
}
