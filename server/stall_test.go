package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawStream sends a stream request on a plain TCP connection and reads
// nothing: a client that has stalled. (Its receive buffer is left alone:
// shrinking it on an open connection makes TCP drop and retransmit.)
func (h *harness) rawStream(id, query string) net.Conn {
	h.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /v1/sandboxes/%s/events/stream?%s HTTP/1.1\r\nHost: sparkles\r\nAuthorization: Bearer %s\r\n\r\n", id, query, h.token)
	if err != nil {
		h.t.Fatal(err)
	}
	return conn
}

// readRaw reads the stream answer of a raw connection and returns its
// durable ids until the stream ends or stop says it is enough.
func readRaw(t testing.TB, conn net.Conn, stop func(ids []uint64) bool) (ids []uint64, err error) {
	t.Helper()
	// A bound so a broken server fails the test instead of hanging it.
	if err := conn.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	// The body is not closed: that would drain a stream that never ends.
	// The connection is closed by the caller's cleanup.
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status %d, want %d", got, want)
	}
	p := newSSEParser(resp.Body)
	for !stop(ids) {
		f, err := p.next()
		if err != nil {
			return ids, err
		}
		if f.hasID {
			id, err := strconv.ParseUint(f.id, 10, 64)
			if err != nil {
				t.Fatalf("id line %q: %v", f.id, err)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func TestStreamStalledReader(t *testing.T) {
	h := newHarness(t, options{sendBuffer: 16 << 10})
	c := h.createSandbox()
	// About 2 MB: far more than the socket buffers of the stalled client.
	ids := h.appendMessages(c.ID, 1000, 2000)
	stalled := h.rawStream(c.ID, "since=0")

	// A second reader gets the whole log while the first takes nothing.
	s := h.openStream(c.ID, "since=0", nil)
	s.snapshot()
	s.expectIDs(ids)

	// The first was only held back, not dropped: it now reads all of it.
	got, err := readRaw(t, stalled, func(got []uint64) bool { return len(got) == len(ids) })
	if err != nil {
		t.Fatalf("stalled reader after %d events: %v", len(got), err)
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("stalled reader: event %d id %d, want %d", i, got[i], ids[i])
		}
	}
}

// streamEnds is a slog handler that reports each finished stream request.
type streamEnds struct{ ch chan struct{} }

func (h streamEnds) Enabled(context.Context, slog.Level) bool { return true }
func (h streamEnds) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h streamEnds) WithGroup(string) slog.Handler            { return h }
func (h streamEnds) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "http request" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "path" && strings.HasSuffix(a.Value.String(), "/events/stream") {
			h.ch <- struct{}{}
		}
		return true
	})
	return nil
}

func TestStreamStalledReaderDropped(t *testing.T) {
	ends := streamEnds{ch: make(chan struct{}, 16)}
	h := newHarness(t, options{sendBuffer: 16 << 10, writeTimeout: 100 * time.Millisecond, logger: slog.New(ends)})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 1000, 2000)
	stalled := h.rawStream(c.ID, "since=0")
	waitClosed(t, ends.ch)
	// The server gave up on it: what was in flight arrives, then the end.
	got, err := readRaw(t, stalled, func([]uint64) bool { return false })
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("the dropped stream is still open after %d events", len(got))
	}
	if len(got) >= len(ids) {
		t.Fatalf("a client that read nothing was sent all %d events", len(got))
	}
}

func TestStreamHeadersBeforeReplay(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 1000, 100)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release)
	h.reads.setOnRead(func(id string, _ uint64) {
		if id == c.ID {
			<-gate
		}
	})
	// No event can be read yet, and still the headers and the snapshot
	// arrive: replay comes after them.
	s := h.openStream(c.ID, "since=0", nil)
	s.snapshot()
	release()
	s.expectIDs(ids)
}

func TestShutdown(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	srv := New(Config{Backend: h.be, Store: h.reads, Token: testToken})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Run("ErrPortTaken", func(t *testing.T) {
		l2, err := net.Listen("tcp", l.Addr().String())
		if err == nil {
			l2.Close()
			t.Fatal("listen on a taken port succeeded")
		}
	})

	other := *h
	other.url = "http://" + l.Addr().String()
	s := other.openStream(c.ID, "", nil)
	s.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	s.ended()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after Shutdown")
	}
	if _, err := http.Get(other.url + "/healthz"); err == nil {
		t.Fatal("server still answers after Shutdown")
	}
}
