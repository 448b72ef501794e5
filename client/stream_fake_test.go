package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// These tests put the reader against scripted servers, for what a real
// server does rarely or never: replay overlapping what was delivered, go
// silent, fail with 503, split frames.

var testTS = time.Date(2026, 8, 6, 12, 0, 0, 0, time.UTC)

func frame(id uint64, typ sandbox.Type, data any) string {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	env := sandbox.AppendEnvelope(nil, id, typ, testTS, "c_1", "turn_1", b)
	var sb strings.Builder
	if id != 0 {
		fmt.Fprintf(&sb, "id: %d\n", id)
	}
	fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", typ, env)
	return sb.String()
}

func snapshotFrame(last uint64) string {
	return frame(0, sandbox.TypeSnapshot, sandbox.Snapshot{LastEventID: sandbox.Seq(last)})
}

func eventFrame(id uint64) string {
	return frame(id, sandbox.TypeMessageUpdated, sandbox.MessageUpdated{PartID: "part_1", Text: fmt.Sprint(id)})
}

func sse(w http.ResponseWriter, frames ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, f := range frames {
		fmt.Fprint(w, f)
	}
	w.(http.Flusher).Flush()
}

func fastOpts() StreamOptions {
	return StreamOptions{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
}

func collect(t *testing.T, s *Stream, n int) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Message
	for len(out) < n {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(out), err)
		}
		if m.Kind == KindSnapshot {
			continue
		}
		out = append(out, m)
	}
	return out
}

func TestStreamDedupe(t *testing.T) {
	var conns atomic.Int32
	headers := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, want := r.Header.Get("Authorization"), "Bearer tok"; got != want {
			http.Error(w, "bad auth "+got, http.StatusUnauthorized)
			return
		}
		headers <- r.Header.Get("Last-Event-ID")
		switch conns.Add(1) {
		case 1:
			sse(w, snapshotFrame(0), eventFrame(1), eventFrame(2), eventFrame(3))
		default:
			// A replay that ignores the cursor and overlaps; the status
			// frame and a frame split across writes come through once.
			sse(w, snapshotFrame(4), eventFrame(2), eventFrame(3),
				frame(0, sandbox.TypeSandboxStatus, sandbox.SandboxStatus{Status: "ready"}))
			f := eventFrame(4)
			sse(w, f[:10])
			sse(w, f[10:])
			<-r.Context().Done()
		}
	}))
	defer srv.Close()

	s := New(srv.URL, "tok").Stream(context.Background(), "c_1", fastOpts())
	defer s.Close()
	got := collect(t, s, 5)
	var desc []string
	for _, m := range got {
		desc = append(desc, fmt.Sprintf("%v:%d", m.Kind, m.Event.ID))
	}
	if got, want := strings.Join(desc, " "), "event:1 event:2 event:3 status:0 event:4"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	if got, want := <-headers, ""; got != want {
		t.Fatalf("first Last-Event-ID = %q, want none", got)
	}
	if got, want := <-headers, "3"; got != want {
		t.Fatalf("Last-Event-ID on reconnect = %q, want %q", got, want)
	}
}

func TestStreamLiveTailCursor(t *testing.T) {
	// Without Since, the cursor of a reconnection is the first snapshot's
	// last_event_id: what happened between connections is not skipped.
	headers := make(chan string, 4)
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header.Get("Last-Event-ID")
		if conns.Add(1) == 1 {
			sse(w, snapshotFrame(41))
			return
		}
		sse(w, snapshotFrame(43), eventFrame(42), eventFrame(43))
		<-r.Context().Done()
	}))
	defer srv.Close()
	s := New(srv.URL, "tok").Stream(context.Background(), "c_1", fastOpts())
	defer s.Close()
	got := collect(t, s, 2)
	if got[0].Event.ID != 42 || got[1].Event.ID != 43 {
		t.Fatalf("delivered %d, %d; want 42, 43", got[0].Event.ID, got[1].Event.ID)
	}
	if got, want := <-headers, ""; got != want {
		t.Fatalf("first Last-Event-ID = %q, want none", got)
	}
	if got, want := <-headers, "41"; got != want {
		t.Fatalf("Last-Event-ID on reconnect = %q, want %q", got, want)
	}
}

func TestStreamRetries(t *testing.T) {
	t.Run("ServerError", func(t *testing.T) {
		var conns atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if conns.Add(1) <= 2 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"error":{"type":"internal","message":"busy"}}`)
				return
			}
			sse(w, snapshotFrame(0), eventFrame(1))
			<-r.Context().Done()
		}))
		defer srv.Close()
		var mu sync.Mutex
		var retried []error
		opts := fastOpts()
		opts.OnRetry = func(err error, _ time.Duration) { mu.Lock(); retried = append(retried, err); mu.Unlock() }
		s := New(srv.URL, "tok").Stream(context.Background(), "c_1", opts)
		defer s.Close()
		collect(t, s, 1)
		mu.Lock()
		defer mu.Unlock()
		if got, want := len(retried), 2; got != want {
			t.Fatalf("%d retries, want %d", got, want)
		}
		if !IsType(retried[0], sandbox.EInternal) {
			t.Fatalf("retried on %v, want the 503", retried[0])
		}
	})
	t.Run("Idle", func(t *testing.T) {
		var conns atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if conns.Add(1) == 1 {
				sse(w, snapshotFrame(0))
				<-r.Context().Done() // silent, no keepalive
				return
			}
			sse(w, snapshotFrame(0), eventFrame(1))
			<-r.Context().Done()
		}))
		defer srv.Close()
		idle := make(chan error, 1)
		opts := fastOpts()
		opts.IdleTimeout = 50 * time.Millisecond
		opts.OnRetry = func(err error, _ time.Duration) {
			select {
			case idle <- err:
			default:
			}
		}
		s := New(srv.URL, "tok").Stream(context.Background(), "c_1", opts)
		defer s.Close()
		collect(t, s, 1)
		if err := <-idle; !strings.Contains(err.Error(), "nothing received") {
			t.Fatalf("retried on %v, want the idle timeout", err)
		}
	})
	t.Run("ErrDecode", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sse(w, "id: 1\nevent: turn.started\ndata: {not json\n\n")
		}))
		defer srv.Close()
		s := New(srv.URL, "tok").Stream(context.Background(), "c_1", fastOpts())
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), "undecodable") {
			t.Fatalf("Next = %v, want a decode error", err)
		}
	})
}

func TestBackoff(t *testing.T) {
	s := &Stream{opts: StreamOptions{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		for range 20 {
			if got := s.backoff(n); got < want/2 || got > want {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, got, want/2, want)
			}
		}
	}
}
