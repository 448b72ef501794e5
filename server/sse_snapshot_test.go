package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// stalledWriter is the response of a client that takes no bytes: its
// first write of at least min bytes (the snapshot frame's data) is handed
// to the test and then blocks, as a write to a full socket does, until
// release is closed.
type stalledWriter struct {
	header  http.Header
	min     int
	big     chan []byte
	release chan struct{}
}

func newStalledWriter(min int) *stalledWriter {
	return &stalledWriter{header: http.Header{}, min: min, big: make(chan []byte, 1), release: make(chan struct{})}
}

func (w *stalledWriter) Header() http.Header { return w.header }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) Write(p []byte) (int, error) {
	if len(p) >= w.min {
		select {
		case w.big <- p:
			<-w.release
		default:
		}
	}
	return len(p), nil
}

// stalledStream runs the stream handler of sandbox id on w until the test
// ends.
func (h *harness) stalledStream(id string, w *stalledWriter) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/sandboxes/"+id+"/events/stream", nil)
	go func() {
		defer close(done)
		h.srv.stream(w, r, httprouter.Params{{Key: "id", Value: id}})
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-w.release:
		default:
			close(w.release)
		}
		<-done
	})
}

func (w *stalledWriter) snapshot(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-w.big:
		return p
	case <-time.After(waitFor):
		t.Fatal("the stream wrote no snapshot")
		return nil
	}
}

// appendTools appends a turn with n tool calls to sandbox id, all still
// running: a snapshot of about n*size bytes (finished ones would be kept
// down to the most recent).
func (h *harness) appendTools(id string, n, size int) {
	h.t.Helper()
	evs := []*sandbox.Event{{Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{Input: sandbox.TextInput("go")}}}
	title := strings.Repeat("t", size)
	for i := range n {
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: "turn_1", Data: &sandbox.ToolUpdated{
			ToolCallID: fmt.Sprintf("tool_%d", i), Title: title, Kind: "read", Status: "running",
		}})
	}
	if err := h.coord.AppendEvents(context.Background(), id, evs...); err != nil {
		h.t.Fatalf("append: %v", err)
	}
}

// TestStreamSnapshotShared: streams that open on the same state write the
// same bytes of its snapshot, so the streams of clients that stop reading
// hold one encoding between them, not one each; a stream after a change
// gets the new state; and once no stream writes it, the encoding is not
// kept.
func TestStreamSnapshotShared(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	h.appendTools(c.ID, 2000, 200) // about 0.5 MB of snapshot
	const big = 64 << 10

	w1, w2 := newStalledWriter(big), newStalledWriter(big)
	h.stalledStream(c.ID, w1)
	h.stalledStream(c.ID, w2)
	s1, s2 := w1.snapshot(t), w2.snapshot(t)
	if !bytes.Contains(s1, []byte(`"tool_1999"`)) {
		t.Fatalf("the first stream's big write is not the snapshot: %.200s", s1)
	}
	if unsafe.SliceData(s1) != unsafe.SliceData(s2) {
		t.Fatal("two stalled streams on one state each hold an encoding of its snapshot")
	}

	ev := &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: "turn_1", Data: &sandbox.ToolUpdated{ToolCallID: "tool_new", Kind: "read", Status: "pending"}}
	if err := h.coord.AppendEvents(context.Background(), c.ID, ev); err != nil {
		t.Fatal(err)
	}
	w3 := newStalledWriter(big)
	h.stalledStream(c.ID, w3)
	s3 := w3.snapshot(t)
	if unsafe.SliceData(s3) == unsafe.SliceData(s1) {
		t.Fatal("a stream after a change got the snapshot of the state before it")
	}
	if want := `"last_event_id":"` + strconv.FormatUint(ev.ID, 10) + `"`; !bytes.Contains(s3, []byte(want)) || !bytes.Contains(s3, []byte(`"tool_new"`)) {
		t.Fatalf("the snapshot after the change does not show it (%s): %.300s", want, s3)
	}

	// Every stream done: the encodings go with the streams.
	s1, s2, s3 = nil, nil, nil
	for _, w := range []*stalledWriter{w1, w2, w3} {
		close(w.release)
	}
	deadline := time.Now().Add(waitFor)
	for !h.srv.snapshots.empty() {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot cache still holds a snapshot no stream writes")
		}
		runtime.GC()
	}
}

// empty reports whether the cache holds no snapshot.
func (c *snapshotCache) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m) == 0
}
