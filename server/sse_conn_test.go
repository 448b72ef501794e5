package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// closedStreams tells of each stream that ended.
type closedStreams struct {
	nopObserver
	ch chan struct{}
}

func (o closedStreams) StreamClosed() { o.ch <- struct{}{} }

// rawResponse reads the head of the answer on a raw stream connection
// (rawStream) and returns it with a parser of its body.
func rawResponse(t *testing.T, h *harness, id string) (*http.Response, *sseParser) {
	t.Helper()
	conn := h.rawStream(id, "")
	if err := conn.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := newSSEParser(resp.Body)
	if f, err := p.next(); err != nil || f.event != "snapshot" {
		t.Fatalf("first frame %+v, %v; want the snapshot", f, err)
	}
	return resp, p
}

// endsCleanly reads the rest of a body and fails unless it ends with its
// last chunk (io.EOF), not cut short.
func endsCleanly(t *testing.T, p *sseParser) {
	t.Helper()
	for {
		_, err := p.next()
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the body ended with %v, want io.EOF after its last chunk", err)
		}
		return
	}
}

// TestStreamConn: a stream over HTTP/1.1, written on the connection the
// server takes from net/http, is a chunked body any HTTP client reads:
// the headers the server set, and frames smaller and larger than a
// chunk's buffer. (TestStreamConnShutdown reads its last chunk.)
func TestStreamConn(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	resp, p := rawResponse(t, h, c.ID)
	if got := resp.TransferEncoding; len(got) != 1 || got[0] != "chunked" {
		t.Fatalf("Transfer-Encoding %v, want chunked", got)
	}
	if !resp.Close {
		t.Fatal("the response does not say Connection: close")
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Fatalf("%s = %q, want %q", k, got, want)
		}
	}
	if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Date") == "" {
		t.Fatalf("headers %v lack X-Request-Id or Date", resp.Header)
	}
	want := append(h.appendMessages(c.ID, 1, 10), h.appendMessages(c.ID, 1, 3*smallFrame)...)
	for _, id := range want {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		var ev sandbox.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.ID != id {
			t.Fatalf("frame %q: %v; want event %d", f.id, err, id)
		}
	}
}

// TestStreamConnClientLeaves: a client that closes its connection ends its
// stream at once, not at the next keepalive (an hour here).
func TestStreamConnClientLeaves(t *testing.T) {
	obs := closedStreams{ch: make(chan struct{}, 4)}
	h := newHarness(t, options{observer: obs, keepalive: time.Hour})
	c := h.createSandbox()
	conn := h.rawStream(c.ID, "")
	if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitClosed(t, obs.ch)
}

// TestStreamConnShutdown: Shutdown ends the streams whose connections the
// server took and returns only once they have ended, each with its last
// chunk.
func TestStreamConnShutdown(t *testing.T) {
	obs := closedStreams{ch: make(chan struct{}, 4)}
	h := newHarness(t, options{observer: obs})
	c := h.createSandbox()
	_, p := rawResponse(t, h, c.ID)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case <-obs.ch:
	default:
		t.Fatal("Shutdown returned before the stream ended")
	}
	endsCleanly(t, p)
}
