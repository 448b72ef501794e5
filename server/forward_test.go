package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// holderBackend is a coordinator that places every sandbox's workspace
// where the test says.
type holderBackend struct {
	*coordinator.Coordinator

	mu    sync.Mutex
	url   string
	here  bool
	err   error
	asked int
}

func (b *holderBackend) Holder(context.Context, string) (string, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	return b.url, b.here, b.err
}

func (b *holderBackend) set(url string, here bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.url, b.here, b.err, b.asked = url, here, err, 0
}

// seenRequest is what the holder was sent.
type seenRequest struct {
	method, uri, auth, rangeHdr, by, rid, origin, body string
}

// TestAtHolder: the workspace routes of a sandbox held by another node
// are proxied to it as they came, and answered as it answers; every way
// the proxy can fail answers 503 in the shape of docs/errors.md.
func TestAtHolder(t *testing.T) {
	st := bolttest.MustOpen(t)
	co, err := coordinator.New(coordinator.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	be := &holderBackend{Coordinator: co}
	front := httptest.NewServer(New(Config{Backend: be, Store: st, Token: testToken, CORSOrigins: []string{"https://app.example"}}))
	t.Cleanup(front.Close)

	seen := make(chan seenRequest, 1)
	holder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- seenRequest{r.Method, r.RequestURI, r.Header.Get("Authorization"), r.Header.Get("Range"),
			r.Header.Get(ForwardedByHeader), r.Header.Get("X-Request-Id"), r.Header.Get("Origin"), string(b)}
		switch {
		case r.Header.Get("Authorization") != "Bearer "+testToken:
			w.WriteHeader(http.StatusUnauthorized)
		case r.Header.Get("Range") != "":
			w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
			w.Header().Set("Content-Range", "bytes 2-4/10")
			w.Header().Set("ETag", `"e1"`)
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, "cde")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"path":"dir x/a.txt"}`)
		}
	}))
	t.Cleanup(holder.Close)

	do := func(method, path, token string, hdr map[string]string, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, front.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	wantError := func(t *testing.T, resp *http.Response, body string, status int, typ, msg string) {
		t.Helper()
		var env struct {
			Error struct{ Type, Message string } `json:"error"`
		}
		if resp.StatusCode != status || json.Unmarshal([]byte(body), &env) != nil || env.Error.Type != typ || !strings.Contains(env.Error.Message, msg) {
			t.Fatalf("answer %d %s, want %d %s with %q", resp.StatusCode, body, status, typ, msg)
		}
	}
	const id = "c_01jx4d8m2q7r0v5b3n6k9p1w2z"

	t.Run("OK", func(t *testing.T) {
		be.set(holder.URL, false, nil)
		resp, body := do("PUT", "/v1/sandboxes/"+id+"/files/dir%20x/a.txt?x=1", testToken,
			map[string]string{"Origin": "https://app.example", "X-Request-Id": "req-upload-1"}, "hello")
		got := <-seen
		want := seenRequest{"PUT", "/v1/sandboxes/" + id + "/files/dir%20x/a.txt?x=1", "Bearer " + testToken, "", got.by, "req-upload-1", "", "hello"}
		if got != want || got.by == "" {
			t.Fatalf("the holder was sent %+v, want %+v with %s set", got, want, ForwardedByHeader)
		}
		if resp.StatusCode != http.StatusCreated || body != `{"path":"dir x/a.txt"}` {
			t.Fatalf("answer %d %s, want the holder's 201", resp.StatusCode, body)
		}
		if got := resp.Header.Values("Access-Control-Allow-Origin"); len(got) != 1 {
			t.Fatalf("Access-Control-Allow-Origin = %q, want this node's one", got)
		}
	})
	t.Run("Range", func(t *testing.T) {
		be.set(holder.URL, false, nil)
		resp, body := do("GET", "/v1/sandboxes/"+id+"/files/a.txt", testToken, map[string]string{"Range": "bytes=2-4"}, "")
		if got := <-seen; got.rangeHdr != "bytes=2-4" || got.method != "GET" {
			t.Fatalf("the holder was sent %+v", got)
		}
		if resp.StatusCode != http.StatusPartialContent || body != "cde" || resp.Header.Get("Content-Range") != "bytes 2-4/10" || resp.Header.Get("ETag") != `"e1"` {
			t.Fatalf("answer %d %q %v, want the holder's 206", resp.StatusCode, body, resp.Header)
		}
		if got := resp.Header.Values("X-Request-Id"); len(got) != 1 {
			t.Fatalf("X-Request-Id = %q, want one", got)
		}
	})
	t.Run("Here", func(t *testing.T) {
		be.set("", true, nil)
		resp, body := do("GET", "/v1/sandboxes/"+id+"/files", testToken, nil, "")
		wantError(t, resp, body, http.StatusNotFound, sandbox.ENotFound, id) // answered here: no such sandbox
		select {
		case got := <-seen:
			t.Fatalf("a request for a workspace here reached the holder: %+v", got)
		default:
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		be.set("", false, sandbox.Errorf(sandbox.ENotFound, "sandbox %s not found", id))
		resp, body := do("GET", "/v1/sandboxes/"+id+"/archive", testToken, nil, "")
		wantError(t, resp, body, http.StatusNotFound, sandbox.ENotFound, "not found")
	})
	t.Run("ErrForwardedTwice", func(t *testing.T) {
		be.set(holder.URL, false, nil)
		resp, body := do("DELETE", "/v1/sandboxes/"+id+"/files/a.txt", testToken, map[string]string{ForwardedByHeader: "127.0.0.1:1"}, "")
		wantError(t, resp, body, http.StatusServiceUnavailable, sandbox.EUnavailable, "moved while the request was forwarded")
	})
	t.Run("ErrHolderGone", func(t *testing.T) {
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		be.set(gone.URL, false, nil)
		resp, body := do("GET", "/v1/sandboxes/"+id+"/files/a.txt", testToken, nil, "")
		wantError(t, resp, body, http.StatusServiceUnavailable, sandbox.EUnavailable, "does not answer")
	})
	t.Run("ErrTokenRefused", func(t *testing.T) {
		other := New(Config{Backend: be, Store: st, Token: "another-token"})
		otherTS := httptest.NewServer(other)
		t.Cleanup(otherTS.Close)
		be.set(otherTS.URL, false, nil)
		resp, body := do("GET", "/v1/sandboxes/"+id+"/files/a.txt", testToken, nil, "")
		wantError(t, resp, body, http.StatusServiceUnavailable, sandbox.EUnavailable, "same --token")
	})
	t.Run("ErrStreamToken", func(t *testing.T) {
		be.set(holder.URL, false, nil)
		resp, body := do("GET", "/v1/sandboxes/"+id+"/files/a.txt", StreamToken(testToken, id), nil, "")
		wantError(t, resp, body, http.StatusForbidden, sandbox.EForbidden, "stream token")
		be.mu.Lock()
		defer be.mu.Unlock()
		if be.asked != 0 {
			t.Fatal("a stream token's request was looked up for proxying")
		}
	})
}
