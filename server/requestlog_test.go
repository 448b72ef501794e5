package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
)

// levels is a slog handler that keeps the level of each request line.
type levels struct {
	mu   *sync.Mutex
	seen *[]slog.Level
}

func (h levels) Enabled(context.Context, slog.Level) bool { return true }
func (h levels) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h levels) WithGroup(string) slog.Handler            { return h }
func (h levels) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "http request" {
		h.mu.Lock()
		*h.seen = append(*h.seen, r.Level)
		h.mu.Unlock()
	}
	return nil
}

// TestRequestLogLevel: request lines are DEBUG unless LogRequests asks
// for them at INFO, so a polling console does not scroll the operator's
// terminal; an answer of 5xx is a WARN either way.
func TestRequestLogLevel(t *testing.T) {
	for _, tt := range []struct {
		name        string
		logRequests bool
		ok, failed  slog.Level
	}{
		{"Default", false, slog.LevelDebug, slog.LevelWarn},
		{"LogRequests", true, slog.LevelInfo, slog.LevelWarn},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var seen []slog.Level
			srv := New(Config{
				Token:       testToken,
				Logger:      slog.New(levels{&sync.Mutex{}, &seen}),
				LogRequests: tt.logRequests,
				Ready:       func() error { return errors.New("the store is closed") },
			})
			t.Cleanup(func() { srv.Shutdown(context.Background()) })
			if w := serve(srv, http.MethodGet, "/healthz", ""); w.Code != http.StatusOK {
				t.Fatalf("/healthz: %d", w.Code)
			}
			if w := serve(srv, http.MethodGet, "/readyz", ""); w.Code != http.StatusServiceUnavailable {
				t.Fatalf("/readyz: %d", w.Code)
			}
			if len(seen) != 2 || seen[0] != tt.ok || seen[1] != tt.failed {
				t.Fatalf("request lines at %v, want [%v %v]", seen, tt.ok, tt.failed)
			}
		})
	}
}
