package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/web"
)

func get(t *testing.T, h http.Handler, method, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func TestHandler(t *testing.T) {
	h := web.Handler()

	t.Run("OK", func(t *testing.T) {
		for path, ct := range map[string]string{
			"/":                   "text/html; charset=utf-8",
			"/index.html":         "text/html; charset=utf-8",
			"/app.js":             "text/javascript; charset=utf-8",
			"/sparkles-events.js": "text/javascript; charset=utf-8",
			"/view.js":            "text/javascript; charset=utf-8",
			"/api.js":             "text/javascript; charset=utf-8",
			"/approval.js":        "text/javascript; charset=utf-8",
			"/dom.js":             "text/javascript; charset=utf-8",
			"/guide.js":           "text/javascript; charset=utf-8",
			"/history.js":         "text/javascript; charset=utf-8",
			"/list.js":            "text/javascript; charset=utf-8",
			"/changes.js":         "text/javascript; charset=utf-8",
			"/files.js":           "text/javascript; charset=utf-8",
			"/workspace.js":       "text/javascript; charset=utf-8",
			"/webhooks.js":        "text/javascript; charset=utf-8",
			"/style.css":          "text/css; charset=utf-8",
			"/favicon.svg":        "image/svg+xml",
		} {
			resp := get(t, h, http.MethodGet, path)
			if got, want := resp.StatusCode, http.StatusOK; got != want {
				t.Fatalf("GET %s: status %d, want %d", path, got, want)
			}
			if got := resp.Header.Get("Content-Type"); got != ct {
				t.Fatalf("GET %s: Content-Type %q, want %q", path, got, ct)
			}
			if got, want := resp.Header.Get("X-Content-Type-Options"), "nosniff"; got != want {
				t.Fatalf("GET %s: X-Content-Type-Options %q, want %q", path, got, want)
			}
			body, _ := io.ReadAll(resp.Body)
			if len(body) == 0 {
				t.Fatalf("GET %s: empty body", path)
			}
		}
	})

	t.Run("Index", func(t *testing.T) {
		resp := get(t, h, http.MethodGet, "/")
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `<script type="module" src="app.js">`) {
			t.Fatalf("the page does not load app.js:\n%s", body)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Fatalf("Content-Security-Policy %q lacks %q", csp, want)
			}
		}
	})

	t.Run("NotModified", func(t *testing.T) {
		etag := get(t, h, http.MethodGet, "/app.js").Header.Get("ETag")
		if etag == "" {
			t.Fatal("no ETag")
		}
		if got, want := get(t, h, http.MethodGet, "/app.js", "If-None-Match", etag).StatusCode, http.StatusNotModified; got != want {
			t.Fatalf("revalidation: status %d, want %d", got, want)
		}
	})

	t.Run("Head", func(t *testing.T) {
		if got, want := get(t, h, http.MethodHead, "/style.css").StatusCode, http.StatusOK; got != want {
			t.Fatalf("HEAD: status %d, want %d", got, want)
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		// The tests and package.json live beside the assets but are not
		// part of the page.
		for _, path := range []string{"/nope.js", "/sparkles-events.test.js", "/console.test.js", "/webhooks.test.js", "/package.json", "/web.go", "/index.html/", "/../web.go"} {
			if got, want := get(t, h, http.MethodGet, path).StatusCode, http.StatusNotFound; got != want {
				t.Fatalf("GET %s: status %d, want %d", path, got, want)
			}
		}
	})

	t.Run("ErrMethod", func(t *testing.T) {
		resp := get(t, h, http.MethodPost, "/")
		if got, want := resp.StatusCode, http.StatusMethodNotAllowed; got != want {
			t.Fatalf("POST /: status %d, want %d", got, want)
		}
		if got, want := resp.Header.Get("Allow"), "GET, HEAD"; got != want {
			t.Fatalf("Allow %q, want %q", got, want)
		}
	})
}

// inCI reports whether the tests run in CI, where a missing tool is a
// failure rather than a reason to skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// TestNodeUnits runs the node tests of sparkles-events.js, so that go test
// ./... covers them.
func TestNodeUnits(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if inCI() {
			t.Fatal("node is not installed; the tests of sparkles-events.js need node 20 or later")
		}
		t.Skip("node is not installed; skipping the tests of sparkles-events.js")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test web/: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("node --test web/ reported failures:\n%s", out)
	}
}
