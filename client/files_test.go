package client_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// request is what a fake server saw of one request.
type request struct {
	Method, Path, RawPath, Query string
	Header                       http.Header
	Body                         string
}

// fakeServer answers every request with answer and records what came.
type fakeServer struct {
	mu   sync.Mutex
	seen []request
	c    *client.Client
}

func newFake(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.seen = append(f.seen, request{r.Method, r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(b)})
		f.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	f.c = client.New(srv.URL, "tok")
	return f
}

func (f *fakeServer) last(t *testing.T) request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		t.Fatal("the server saw no request")
	}
	return f.seen[len(f.seen)-1]
}

func answerJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func answerError(w http.ResponseWriter, status int, typ, msg string) {
	answerJSON(w, status, map[string]any{"error": map[string]string{"type": typ, "message": msg}})
}

// answerFile answers as the contract serves a file.
func answerFile(w http.ResponseWriter, r *http.Request, contentType, body string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("ETag", `"abc"`)
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Last-Modified", "Sat, 05 Dec 2026 05:00:00 GMT")
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
}

var listing = map[string]any{"object": "list", "has_more": true, "data": []map[string]any{
	{"path": "dir x/a%b.txt", "type": "file", "size": 3, "modified_at": "2026-12-05T05:00:00.000Z"},
	{"path": "dir x/sub", "type": "dir", "size": 0, "modified_at": "2026-12-05T05:00:01.000Z"},
}}

func TestFiles(t *testing.T) {
	ctx := testContext(t)
	t.Run("OK", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerJSON(w, 200, listing) })
		page, err := f.c.Files(ctx, "c_1", "dir x/", client.ListFilesOptions{Limit: 2, After: "dir x/0"})
		if err != nil {
			t.Fatal(err)
		}
		req := f.last(t)
		if got, want := req.RawPath, "/v1/sandboxes/c_1/files/dir%20x"; got != want {
			t.Errorf("path = %q, want %q", got, want)
		}
		if got, want := req.Query, "after=dir+x%2F0&limit=2"; got != want {
			t.Errorf("query = %q, want %q", got, want)
		}
		if got, want := req.Header.Get("Authorization"), "Bearer tok"; got != want {
			t.Errorf("Authorization = %q, want %q", got, want)
		}
		if !page.HasMore || len(page.Data) != 2 {
			t.Fatalf("page = %+v", page)
		}
		e := page.Data[0]
		if e.Path != "dir x/a%b.txt" || e.Type != client.EntryFile || e.Size != 3 || !e.ModifiedAt.Equal(time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)) {
			t.Errorf("entry = %+v", e)
		}
	})
	t.Run("Root", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerJSON(w, 200, listing) })
		for _, dir := range []string{"", ".", "/"} {
			if _, err := f.c.Files(ctx, "c_1", dir, client.ListFilesOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, want := f.last(t).RawPath, "/v1/sandboxes/c_1/files"; got != want {
				t.Errorf("Files(%q): path = %q, want %q", dir, got, want)
			}
		}
	})
	t.Run("ErrNotDirectory", func(t *testing.T) {
		// A JSON file is served as application/json too: the listing is
		// told by the headers of a file, not by the type.
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerFile(w, r, "application/json", `{"object":"list","data":[]}`)
		})
		if _, err := f.c.Files(ctx, "c_1", "x.json", client.ListFilesOptions{}); !errors.Is(err, client.ErrNotDirectory) {
			t.Fatalf("err = %v, want ErrNotDirectory", err)
		}
	})
	t.Run("All", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("after") == "" {
				answerJSON(w, 200, map[string]any{"object": "list", "has_more": true, "data": []map[string]any{{"path": "a", "type": "file"}}})
				return
			}
			answerJSON(w, 200, map[string]any{"object": "list", "has_more": false, "data": []map[string]any{{"path": "b", "type": "dir"}}})
		})
		var paths []string
		for e, err := range f.c.AllFiles(ctx, "c_1", "") {
			if err != nil {
				t.Fatal(err)
			}
			paths = append(paths, e.Path)
		}
		if got, want := strings.Join(paths, ","), "a,b"; got != want {
			t.Fatalf("paths = %q, want %q", got, want)
		}
		if got, want := f.last(t).Query, "after=a&limit=1000"; got != want {
			t.Fatalf("query of the second page = %q, want %q", got, want)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerError(w, 404, sandbox.ENotFound, `no file or directory "x" in the workspace`)
		})
		_, err := f.c.Files(ctx, "c_1", "x", client.ListFilesOptions{})
		wantType(t, err, sandbox.ENotFound, 404)
	})
}

func TestReadFile(t *testing.T) {
	ctx := testContext(t)
	t.Run("OK", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerFile(w, r, "application/json", `{"a":1}`) })
		body, e, err := f.c.ReadFile(ctx, "c_1", "/conf/a b.json")
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		b, _ := io.ReadAll(body)
		if got, want := string(b), `{"a":1}`; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if got, want := f.last(t).RawPath, "/v1/sandboxes/c_1/files/conf/a%20b.json"; got != want {
			t.Errorf("path = %q, want %q", got, want)
		}
		want := client.FileEntry{Path: "conf/a b.json", Type: client.EntryFile, Size: 7, ETag: `"abc"`,
			ContentType: "application/json", ModifiedAt: time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)}
		if e != want {
			t.Errorf("entry = %+v, want %+v", e, want)
		}
	})
	t.Run("ErrIsDirectory", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerJSON(w, 200, listing) })
		if _, _, err := f.c.ReadFile(ctx, "c_1", "dir x"); !errors.Is(err, client.ErrIsDirectory) {
			t.Fatalf("err = %v, want ErrIsDirectory", err)
		}
		e, err := f.c.StatFile(ctx, "c_1", "dir x")
		if err != nil || e.Type != client.EntryDir || e.Path != "dir x" {
			t.Fatalf("StatFile = %+v, %v; want a dir", e, err)
		}
	})
	t.Run("Escapes", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerFile(w, r, "text/plain", "x") })
		for p, want := range map[string]string{
			"a?b#c.txt":   "/v1/sandboxes/c_1/files/a%3Fb%23c.txt",
			"d/./e//f.md": "/v1/sandboxes/c_1/files/d/e/f.md",
			"100%.txt":    "/v1/sandboxes/c_1/files/100%25.txt",
		} {
			if _, err := f.c.StatFile(ctx, "c_1", p); err != nil {
				t.Fatal(err)
			}
			if got := f.last(t).RawPath; got != want {
				t.Errorf("StatFile(%q): path = %q, want %q", p, got, want)
			}
		}
	})
}

func TestWriteFile(t *testing.T) {
	ctx := testContext(t)
	entry := map[string]any{"path": "notes.txt", "type": "file", "size": 5, "modified_at": "2026-12-05T05:00:00.000Z"}
	t.Run("Created", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"new"`)
			answerJSON(w, 201, entry)
		})
		e, err := f.c.WriteFile(ctx, "c_1", "notes.txt", strings.NewReader("hello"), client.WriteFileOptions{IfNoneMatch: "*"})
		if err != nil {
			t.Fatal(err)
		}
		req := f.last(t)
		if req.Method != http.MethodPut || req.Path != "/v1/sandboxes/c_1/files/notes.txt" || req.Body != "hello" {
			t.Errorf("request = %s %s %q", req.Method, req.Path, req.Body)
		}
		if got, want := req.Header.Get("If-None-Match"), "*"; got != want {
			t.Errorf("If-None-Match = %q, want %q", got, want)
		}
		if req.Header.Get("If-Match") != "" {
			t.Errorf("If-Match = %q, want none", req.Header.Get("If-Match"))
		}
		if !e.Created || e.ETag != `"new"` || e.Path != "notes.txt" || e.Size != 5 {
			t.Errorf("entry = %+v", e)
		}
	})
	t.Run("Replaced", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerJSON(w, 200, entry) })
		// A stream of unknown length goes chunked.
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte("hel")); pw.Write([]byte("lo")); pw.Close() }()
		e, err := f.c.WriteFile(ctx, "c_1", "notes.txt", pr, client.WriteFileOptions{IfMatch: "abc"})
		if err != nil {
			t.Fatal(err)
		}
		req := f.last(t)
		if got, want := req.Header.Get("If-Match"), `"abc"`; got != want {
			t.Errorf("If-Match = %q, want %q (quoted)", got, want)
		}
		if req.Body != "hello" || e.Created {
			t.Errorf("body %q, entry %+v", req.Body, e)
		}
	})
	t.Run("ErrPreconditionFailed", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerError(w, 412, sandbox.EPreconditionFailed, "notes.txt changed")
		})
		_, err := f.c.WriteFile(ctx, "c_1", "notes.txt", strings.NewReader("x"), client.WriteFileOptions{IfMatch: `"abc"`})
		wantType(t, err, sandbox.EPreconditionFailed, 412)
		if !errors.Is(err, client.ErrPreconditionFailed) {
			t.Fatalf("errors.Is(%v, ErrPreconditionFailed) = false", err)
		}
		if got, want := f.last(t).Header.Get("If-Match"), `"abc"`; got != want {
			t.Errorf("If-Match = %q, want %q", got, want)
		}
	})
	t.Run("ErrInsufficientStorage", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerError(w, 507, "insufficient_storage", "the sandbox's disk limit (--sandbox-disk-max) is reached")
		})
		_, err := f.c.WriteFile(ctx, "c_1", "big", strings.NewReader("x"), client.WriteFileOptions{})
		if !errors.Is(err, client.ErrInsufficientStorage) {
			t.Fatalf("errors.Is(%v, ErrInsufficientStorage) = false", err)
		}
	})
}

func TestDeleteFile(t *testing.T) {
	ctx := testContext(t)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, 200, map[string]any{"path": "d", "deleted": true})
	})
	if err := f.c.DeleteFile(ctx, "c_1", "d", true); err != nil {
		t.Fatal(err)
	}
	if req := f.last(t); req.Method != http.MethodDelete || req.Path != "/v1/sandboxes/c_1/files/d" || req.Query != "recursive=true" {
		t.Fatalf("request = %s %s?%s", req.Method, req.Path, req.Query)
	}
	if err := f.c.DeleteFile(ctx, "c_1", "d/f", false); err != nil {
		t.Fatal(err)
	}
	if req := f.last(t); req.Path != "/v1/sandboxes/c_1/files/d/f" || req.Query != "" {
		t.Fatalf("request = %s?%s", req.Path, req.Query)
	}
}

func TestArchiveCalls(t *testing.T) {
	ctx := testContext(t)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/gzip")
			io.WriteString(w, "GZ")
			return
		}
		answerJSON(w, 200, map[string]any{"entries": 2, "bytes": 10, "skipped": []map[string]string{{"path": "p", "reason": "FIFO"}}})
	})
	body, err := f.c.Archive(ctx, "c_1", "src/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if req := f.last(t); string(b) != "GZ" || req.Path != "/v1/sandboxes/c_1/archive" || req.Query != "path=src" {
		t.Fatalf("archive: %q from %s?%s", b, req.Path, req.Query)
	}
	if _, err := f.c.Archive(ctx, "c_1", ""); err != nil {
		t.Fatal(err)
	}
	if req := f.last(t); req.Query != "" {
		t.Fatalf("archive of the root: query %q, want none", req.Query)
	}
	sum, err := f.c.Unpack(ctx, "c_1", "out dir", strings.NewReader("TAR"))
	if err != nil {
		t.Fatal(err)
	}
	req := f.last(t)
	if req.Method != http.MethodPut || req.Query != "path=out+dir" || req.Body != "TAR" {
		t.Fatalf("unpack request = %s ?%s %q", req.Method, req.Query, req.Body)
	}
	if sum.Entries != 2 || sum.Bytes != 10 || len(sum.Skipped) != 1 || sum.Skipped[0].Reason != "FIFO" {
		t.Fatalf("summary = %+v", sum)
	}
}

func TestDiffRevertCalls(t *testing.T) {
	ctx := testContext(t)
	const diff = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/diff"):
			w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
			io.WriteString(w, diff)
		case strings.HasSuffix(r.URL.Path, "/revert"):
			answerJSON(w, 200, map[string]any{"id": "c_1", "object": "sandbox", "status": "ready"})
		}
	})
	got, err := f.c.Diff(ctx, "c_1", "turn_1")
	if err != nil || got != diff {
		t.Fatalf("Diff = %q, %v", got, err)
	}
	if req := f.last(t); req.Method != http.MethodGet || req.Path != "/v1/sandboxes/c_1/turns/turn_1/diff" {
		t.Fatalf("diff request = %s %s", req.Method, req.Path)
	}
	sb, err := f.c.Revert(ctx, "c_1", "turn_1")
	if err != nil || sb.ID != "c_1" || sb.Status != "ready" {
		t.Fatalf("Revert = %+v, %v", sb, err)
	}
	if req := f.last(t); req.Method != http.MethodPost || req.Path != "/v1/sandboxes/c_1/turns/turn_1/revert" {
		t.Fatalf("revert request = %s %s", req.Method, req.Path)
	}
}

func TestCreateSandboxSource(t *testing.T) {
	ctx := testContext(t)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, 201, map[string]any{"id": "c_1", "object": "sandbox", "status": "creating"})
	})
	_, err := f.c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Source: &sandbox.Source{Git: &sandbox.GitSource{URL: "https://example.com/r.git", Ref: "main", Depth: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.last(t).Body, `{"source":{"git":{"url":"https://example.com/r.git","ref":"main","depth":1}}}`; got != want {
		t.Fatalf("body = %s, want %s", got, want)
	}
}

// TestWorkspace runs the calls against the real server: what the fakes
// above assume of its answers holds.
func TestWorkspace(t *testing.T) {
	srv := sparklestest.Start(t)
	c, ctx := srv.Client, testContext(t)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID

	e, err := c.WriteFile(ctx, id, "dir x/a b.json", strings.NewReader(`{"a":1}`), client.WriteFileOptions{IfNoneMatch: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Created || e.ETag == "" || e.Path != "dir x/a b.json" || e.Size != 7 {
		t.Fatalf("written entry = %+v", e)
	}
	body, got, err := c.ReadFile(ctx, id, "dir x/a b.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != `{"a":1}` || got.ETag != e.ETag || got.Size != 7 || got.Type != client.EntryFile {
		t.Fatalf("read %q, entry %+v (written %+v)", b, got, e)
	}
	// A JSON file is a file, and a directory is a listing.
	if _, err := c.Files(ctx, id, "dir x/a b.json", client.ListFilesOptions{}); !errors.Is(err, client.ErrNotDirectory) {
		t.Fatalf("Files of a file: %v, want ErrNotDirectory", err)
	}
	if _, _, err := c.ReadFile(ctx, id, "dir x"); !errors.Is(err, client.ErrIsDirectory) {
		t.Fatalf("ReadFile of a directory: %v, want ErrIsDirectory", err)
	}
	page, err := c.Files(ctx, id, "", client.ListFilesOptions{})
	if err != nil || len(page.Data) != 1 || page.Data[0].Path != "dir x" || page.Data[0].Type != client.EntryDir {
		t.Fatalf("root listing = %+v, %v", page, err)
	}

	_, err = c.WriteFile(ctx, id, "dir x/a b.json", strings.NewReader("{}"), client.WriteFileOptions{IfMatch: `"stale"`})
	wantType(t, err, sandbox.EPreconditionFailed, 412)
	e2, err := c.WriteFile(ctx, id, "dir x/a b.json", strings.NewReader("{}"), client.WriteFileOptions{IfMatch: e.ETag})
	if err != nil || e2.Created || e2.ETag == e.ETag {
		t.Fatalf("replace with the current ETag: %+v, %v", e2, err)
	}

	// The archive of a directory unpacks into another as the same tree.
	arch, err := c.Archive(ctx, id, "dir x")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := c.Unpack(ctx, id, "copy", arch)
	arch.Close()
	if err != nil || sum.Entries != 1 {
		t.Fatalf("unpack = %+v, %v", sum, err)
	}
	body, _, err = c.ReadFile(ctx, id, "copy/a b.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(body)
	body.Close()
	if string(b) != "{}" {
		t.Fatalf("unpacked file = %q", b)
	}

	if err := c.DeleteFile(ctx, id, "copy", false); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete a full directory without recursive: %v, want ErrConflict", err)
	}
	if err := c.DeleteFile(ctx, id, "copy", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, id, "copy"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat of a deleted directory: %v, want ErrNotFound", err)
	}

	// A turn that writes a file: its diff shows it, and a revert undoes it.
	turn, err := c.StartTurn(ctx, id, "write notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	evs := waitTurn(t, c, id, turn.ID, uint64(sb.LastEventID), func(a *sandbox.ApprovalRequested) {
		if _, err := c.Decide(ctx, id, a.ApprovalID, client.Approve); err != nil {
			t.Error(err)
		}
	})
	done := find[sandbox.TurnCompleted](t, evs)
	if done.Changes == nil || done.Changes.Added != 1 || len(done.Changes.Files) != 1 || done.Changes.Files[0].Path != "notes.txt" {
		t.Fatalf("changes = %+v", done.Changes)
	}
	diff, err := c.Diff(ctx, id, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(diff, "diff --git a/notes.txt b/notes.txt\n") || !strings.Contains(diff, "\n+") {
		t.Fatalf("diff = %q", diff)
	}
	if _, err := c.Revert(ctx, id, turn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, id, "notes.txt"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("notes.txt after the revert: %v, want ErrNotFound", err)
	}
	if _, err := c.StatFile(ctx, id, "dir x/a b.json"); err != nil {
		t.Fatalf("a file from before the turn after the revert: %v", err)
	}
}
