package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var corsHeaderNames = []string{
	"Access-Control-Allow-Origin",
	"Access-Control-Allow-Methods",
	"Access-Control-Allow-Headers",
	"Access-Control-Max-Age",
	"Access-Control-Expose-Headers",
	"Access-Control-Allow-Credentials",
	"Vary",
}

// newCORSServer is a server without agents whose CORS allow-list is origins.
func newCORSServer(t *testing.T, origins ...string) (*Server, string) {
	t.Helper()
	st := bolttest.MustOpen(t)
	coord, err := coordinator.New(coordinator.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Backend: coord, Store: st, Token: testToken, CORSOrigins: origins})
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		coord.Close()
		st.Close()
	})
	sb, err := coord.CreateSandbox(context.Background(), sandbox.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	return srv, sb.ID
}

// serve answers one request in memory.
func serve(srv *Server, method, path, token string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	return w
}

func preflight(srv *Server, path, origin string) *httptest.ResponseRecorder {
	return serve(srv, http.MethodOptions, path, "",
		"Origin", origin,
		"Access-Control-Request-Method", http.MethodPost,
		"Access-Control-Request-Headers", "authorization, content-type, last-event-id")
}

// noCORS fails unless the answer carries no CORS header at all.
func noCORS(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	for _, h := range corsHeaderNames {
		if v := w.Header().Values(h); len(v) > 0 {
			t.Fatalf("%s: %q, want no such header", h, v)
		}
	}
}

func hasToken(list, want string) bool {
	for _, v := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(v), want) {
			return true
		}
	}
	return false
}

func TestCORS(t *testing.T) {
	const app = "https://app.example"
	srv, id := newCORSServer(t, "https://App.Example/", "http://localhost:3000")

	t.Run("Preflight", func(t *testing.T) {
		for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/" + id + "/events/stream", "/v1/sandboxes/" + id + "/approvals/appr_x"} {
			w := preflight(srv, path, app)
			if got, want := w.Code, http.StatusNoContent; got != want {
				t.Fatalf("%s: status %d, want %d", path, got, want)
			}
			h := w.Header()
			if got, want := h.Get("Access-Control-Allow-Origin"), app; got != want {
				t.Fatalf("Allow-Origin %q, want %q", got, want)
			}
			for _, m := range []string{"GET", "POST", "DELETE"} {
				if !hasToken(h.Get("Access-Control-Allow-Methods"), m) {
					t.Fatalf("Allow-Methods %q lacks %s", h.Get("Access-Control-Allow-Methods"), m)
				}
			}
			for _, name := range []string{"Authorization", "Content-Type", "Last-Event-ID"} {
				if !hasToken(h.Get("Access-Control-Allow-Headers"), name) {
					t.Fatalf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), name)
				}
			}
			if got := h.Get("Access-Control-Max-Age"); got == "" || got == "0" {
				t.Fatalf("Max-Age %q", got)
			}
			if !hasToken(strings.Join(h.Values("Vary"), ","), "Origin") {
				t.Fatalf("Vary %q lacks Origin", h.Values("Vary"))
			}
			if h.Get("Access-Control-Allow-Credentials") != "" {
				t.Fatal("credentials allowed: the API takes bearer tokens, never cookies")
			}
		}
	})
	t.Run("OtherAllowedOrigin", func(t *testing.T) {
		w := preflight(srv, "/v1/sandboxes", "http://localhost:3000")
		if got, want := w.Header().Get("Access-Control-Allow-Origin"), "http://localhost:3000"; got != want {
			t.Fatalf("Allow-Origin %q, want %q", got, want)
		}
	})
	t.Run("ActualRequest", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, token string
			status            int
		}{
			{"OK", "/v1/sandboxes/" + id, testToken, http.StatusOK},
			{"ErrUnauthorized", "/v1/sandboxes/" + id, "", http.StatusUnauthorized},
			{"ErrNotFound", "/v1/sandboxes/c_nope", testToken, http.StatusNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w := serve(srv, http.MethodGet, tc.path, tc.token, "Origin", app)
				if got, want := w.Code, tc.status; got != want {
					t.Fatalf("status %d, want %d: %s", got, want, w.Body)
				}
				h := w.Header()
				if got, want := h.Get("Access-Control-Allow-Origin"), app; got != want {
					t.Fatalf("Allow-Origin %q, want %q", got, want)
				}
				if !hasToken(h.Get("Access-Control-Expose-Headers"), "X-Request-Id") {
					t.Fatalf("Expose-Headers %q lacks X-Request-Id", h.Get("Access-Control-Expose-Headers"))
				}
				if !hasToken(strings.Join(h.Values("Vary"), ","), "Origin") {
					t.Fatalf("Vary %q lacks Origin", h.Values("Vary"))
				}
				if h.Get("Access-Control-Allow-Methods") != "" {
					t.Fatal("an actual request answered like a preflight")
				}
			})
		}
	})
	t.Run("Stream", func(t *testing.T) {
		ts := httptest.NewServer(srv)
		defer ts.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/sandboxes/"+id+"/events/stream", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Origin", app)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if got, want := resp.Header.Get("Access-Control-Allow-Origin"), app; got != want {
			t.Fatalf("stream Allow-Origin %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Content-Type"), "text/event-stream"; got != want {
			t.Fatalf("Content-Type %q, want %q", got, want)
		}
	})
	t.Run("ErrDisallowedOrigin", func(t *testing.T) {
		for _, origin := range []string{"https://evil.example", "https://app.example.evil.example", "http://app.example", "null"} {
			noCORS(t, preflight(srv, "/v1/sandboxes", origin))
			noCORS(t, serve(srv, http.MethodGet, "/v1/sandboxes/"+id, testToken, "Origin", origin))
		}
	})
	t.Run("NoOrigin", func(t *testing.T) {
		noCORS(t, serve(srv, http.MethodGet, "/v1/sandboxes/"+id, testToken))
	})
	t.Run("PreflightNeedsNoToken", func(t *testing.T) {
		// A preflight never carries the token; it must not be refused for it,
		// and must not reach a handler either.
		w := preflight(srv, "/v1/sandboxes/"+id, app)
		if got, want := w.Code, http.StatusNoContent; got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
		if w.Body.Len() != 0 {
			t.Fatalf("preflight body %q", w.Body)
		}
	})
}

func TestCORSOff(t *testing.T) {
	srv, id := newCORSServer(t)
	for _, origin := range []string{"https://app.example", "null"} {
		noCORS(t, preflight(srv, "/v1/sandboxes", origin))
		noCORS(t, serve(srv, http.MethodGet, "/v1/sandboxes/"+id, testToken, "Origin", origin))
		noCORS(t, serve(srv, http.MethodGet, "/v1/sandboxes/"+id, "", "Origin", origin))
	}
	t.Run("EmptyEntries", func(t *testing.T) {
		srv, id := newCORSServer(t, "", "  ")
		noCORS(t, serve(srv, http.MethodGet, "/v1/sandboxes/"+id, testToken, "Origin", "https://app.example"))
	})
}
