package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// expectIDs reads durable frames and checks they are exactly want, in order.
func (s *stream) expectIDs(want []uint64) {
	s.t.Helper()
	for i, w := range want {
		if got := s.durable(); got != w {
			s.t.Fatalf("event %d of %d: id %d, want %d", i, len(want), got, w)
		}
	}
}

func after(ids []uint64, cursor uint64) []uint64 {
	i, _ := slices.BinarySearch(ids, cursor+1)
	return ids[i:]
}

func TestStreamSnapshot(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 5, 10)
	s := h.openStream(c.ID, "", nil)
	snap := s.snapshot()
	if got, want := uint64(snap.LastEventID), ids[4]; got != want {
		t.Fatalf("snapshot last_event_id %d, want %d", got, want)
	}
	if got, want := snap.Sandbox.ID, c.ID; got != want {
		t.Fatalf("snapshot sandbox %q, want %q", got, want)
	}
	if got, want := len(snap.Messages), 5; got != want {
		t.Fatalf("snapshot has %d message parts, want %d", got, want)
	}
	// Without a cursor the stream goes on after the snapshot: nothing it
	// already holds, then the live tail.
	live := h.appendMessages(c.ID, 3, 10)
	s.expectIDs(live)
}

func TestStreamReplay(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 600, 10)
	t.Run("Since0", func(t *testing.T) {
		s := h.openStream(c.ID, "since=0", nil)
		s.snapshot()
		s.expectIDs(ids)
	})
	t.Run("LastEventIDWins", func(t *testing.T) {
		s := h.openStream(c.ID, "since=10", map[string]string{"Last-Event-ID": sandbox.FormatID(ids[300])})
		s.snapshot()
		s.expectIDs(after(ids, ids[300]))
	})
	t.Run("EmptyLastEventIDIsAbsent", func(t *testing.T) {
		s := h.openStream(c.ID, "since="+sandbox.FormatID(ids[590]), map[string]string{"Last-Event-ID": ""})
		s.snapshot()
		s.expectIDs(after(ids, ids[590]))
	})
}

func TestStreamResumeEveryCursor(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 200, 10)
	last := ids[len(ids)-1]
	// One stream per cursor, all open at once, so one append afterwards
	// checks the live tail of every one of them.
	streams := make([]*stream, 0, last+1)
	for cursor := uint64(0); cursor <= last; cursor++ {
		var s *stream
		if cursor%2 == 0 {
			s = h.openStream(c.ID, "since="+strconv.FormatUint(cursor, 10), nil)
		} else {
			s = h.openStream(c.ID, "", map[string]string{"Last-Event-ID": strconv.FormatUint(cursor, 10)})
		}
		s.snapshot()
		s.expectIDs(after(ids, cursor))
		streams = append(streams, s)
	}
	live := h.appendMessages(c.ID, 1, 10)
	for _, s := range streams {
		s.expectIDs(live)
	}
}

// TestStreamResumeAhead: a coordinator of a shared store may not have heard
// yet of what another wrote, such as the event whose id a client that
// reconnects to it at once resumes from. A cursor beyond its state is
// checked with the store's Read before it is called stale; the stream
// then opens and goes on after it. A cursor the log never reached is
// still refused.
func TestStreamResumeAhead(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 3, 10)
	var lagged atomic.Int64
	h.reads.setLagState(func(st *sandbox.State) {
		if lagged.Add(1) == 1 {
			st.Sandbox.LastEventID = sandbox.Seq(ids[0]) // the first answer is behind
		}
	})
	s := h.openStream(c.ID, "", map[string]string{"Last-Event-ID": strconv.FormatUint(ids[2], 10)})
	s.snapshot()
	live := h.appendMessages(c.ID, 1, 10)
	s.expectIDs(live)
	s.close()

	h.reads.setLagState(nil)
	_, resp := h.tryStream(c.ID, "since="+sandbox.FormatID(live[0]+10), nil)
	if resp == nil {
		t.Fatal("a cursor the log never reached opened a stream")
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header}
	r.body, _ = readAll(resp)
	r.fails(t, http.StatusGone, sandbox.ECursorStale)
}

// TestStreamSharedTail: streams of one sandbox at its tail do not read the
// store each; the tail's reader reads the new events of a commit once, for
// all of them. A stream that opens far behind reads the store until it
// is within the tail, then joins it, with no gap and no duplicate.
func TestStreamSharedTail(t *testing.T) {
	const streams, commits = 40, 20
	h := newHarness(t, options{})
	c := h.createSandbox()
	old := h.appendMessages(c.ID, 3*tailMax, 10)
	var reads atomic.Int64
	h.reads.setOnRead(func(id string, _ uint64) {
		if id == c.ID {
			reads.Add(1)
		}
	})
	open := make([]*stream, streams)
	for i := range open {
		open[i] = h.openStream(c.ID, "", nil)
		open[i].snapshot()
	}
	behind := h.openStream(c.ID, "since=0", nil)
	behind.snapshot()
	behind.expectIDs(old)
	reads.Store(0)
	var live []uint64
	for range commits {
		ids := h.appendMessages(c.ID, 1, 10)
		live = append(live, ids...)
		// Each commit delivered before the next: every one wakes every
		// stream.
		for _, s := range open {
			s.expectIDs(ids)
		}
		behind.expectIDs(ids)
	}
	if got := reads.Load(); got > commits {
		t.Fatalf("%d streams read the store %d times for %d commits, want at most one read a commit", streams+1, got, commits)
	}
}

// TestStreamTailJoinLeave: a stream alone on its sandbox reads the tail
// itself; when a second joins, the tail's reader takes over for both; when
// the first leaves, the other goes on; when the last leaves, a new stream
// starts a tail of its own. Every commit reaches every open stream.
func TestStreamTailJoinLeave(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	first := h.openStream(c.ID, "", nil)
	first.snapshot()
	first.expectIDs(h.appendMessages(c.ID, 2, 10))

	second := h.openStream(c.ID, "", nil)
	second.snapshot()
	for range 3 {
		ids := h.appendMessages(c.ID, 1, 10)
		first.expectIDs(ids)
		second.expectIDs(ids)
	}

	first.close()
	second.expectIDs(h.appendMessages(c.ID, 2, 10))
	second.close()

	third := h.openStream(c.ID, "", nil)
	third.snapshot()
	third.expectIDs(h.appendMessages(c.ID, 2, 10))
}

// TestStreamNoGap commits an event right after the sandbox's tail has read
// the head it shows the stream, before the stream goes to sleep: the
// wake-up it sleeps on must have been taken before that read, or the
// event would wait for the next commit.
func TestStreamNoGap(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	h.appendMessages(c.ID, 3, 10)
	ev := &sandbox.Event{Type: sandbox.TypeToolUpdated, Data: &sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "t", Kind: "read", Status: "running"}}
	committed := make(chan struct{})
	var once sync.Once
	h.reads.setAfterHead(func(id string) {
		if id == c.ID {
			once.Do(func() {
				if err := h.coord.AppendEvents(context.Background(), c.ID, ev); err != nil {
					t.Errorf("append: %v", err)
				}
				close(committed)
			})
		}
	})
	s := h.openStream(c.ID, "", nil)
	s.snapshot()
	waitClosed(t, committed)
	s.expectIDs([]uint64{ev.ID})
}

func TestStreamCursorErrors(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 300, 10)
	last := ids[len(ids)-1]
	fails := func(t *testing.T, query string, header map[string]string, status int, typ string) apiError {
		t.Helper()
		_, resp := h.tryStream(c.ID, query, header)
		if resp == nil {
			t.Fatalf("stream opened, want %d %s", status, typ)
		}
		defer resp.Body.Close()
		if got, want := resp.Header.Get("Content-Type"), "application/json"; got != want {
			t.Fatalf("Content-Type %q, want %q", got, want)
		}
		r := response{status: resp.StatusCode, header: resp.Header}
		r.body, _ = readAll(resp)
		return r.fails(t, status, typ)
	}
	for _, cur := range badCursors {
		t.Run("ErrInvalidCursor", func(t *testing.T) {
			fails(t, "since="+url.QueryEscape(cur), nil, http.StatusBadRequest, sandbox.EInvalidCursor)
		})
	}
	for _, cur := range []string{"-1", "abc", "1.5", "1e30"} {
		t.Run("ErrInvalidLastEventID", func(t *testing.T) {
			fails(t, "since=0", map[string]string{"Last-Event-ID": cur}, http.StatusBadRequest, sandbox.EInvalidCursor)
		})
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		_, resp := h.tryStream("c_nope", "", nil)
		if resp == nil {
			t.Fatal("stream of an unknown sandbox opened")
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusNotFound; got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		e := fails(t, "since="+sandbox.FormatID(last+1), nil, http.StatusGone, sandbox.ECursorStale)
		checkMarks(t, e, ids[0], 0, last)
	})
	// A decimal beyond 64 bits is a cursor beyond the log, not a malformed one.
	for _, cur := range oversizedCursors {
		t.Run("ErrCursorStaleOversized", func(t *testing.T) {
			e := fails(t, "", map[string]string{"Last-Event-ID": cur}, http.StatusGone, sandbox.ECursorStale)
			checkMarks(t, e, ids[0], 0, last)
			e = fails(t, "since="+cur, nil, http.StatusGone, sandbox.ECursorStale)
			checkMarks(t, e, ids[0], 0, last)
		})
	}
	t.Run("ErrCursorPruned", func(t *testing.T) {
		h.prune(c.ID, ids[99])
		e := fails(t, "", map[string]string{"Last-Event-ID": sandbox.FormatID(ids[50])}, http.StatusGone, sandbox.ECursorPruned)
		checkMarks(t, e, ids[100], ids[99], last)
		// At pruned_through itself nothing is missing: resume is exact.
		s := h.openStream(c.ID, "since="+sandbox.FormatID(ids[99]), nil)
		s.snapshot()
		s.expectIDs(ids[100:])
		// since=0 is never refused.
		s0 := h.openStream(c.ID, "since=0", nil)
		if got, want := s0.snapshot().PrunedThrough, sandbox.Seq(ids[99]); got != want {
			t.Fatalf("snapshot pruned_through %d, want %d", got, want)
		}
		s0.expectIDs(ids[100:])
	})
}

func TestStreamPrunedUnderfoot(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 3*replayBatch, 10)
	cut := ids[replayBatch-1]
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.reads.setOnRead(func(id string, after uint64) {
		if id == c.ID && after == cut {
			once.Do(func() { close(reached) })
			<-release
		}
	})
	s := h.openStream(c.ID, "since=0", nil)
	s.snapshot()
	s.expectIDs(ids[:replayBatch])
	waitClosed(t, reached)
	h.prune(c.ID, ids[2*replayBatch])
	close(release)
	// The stream ends rather than skip what was pruned under it...
	s.ended()
	// ...and the reconnect learns why.
	_, resp := h.tryStream(c.ID, "", map[string]string{"Last-Event-ID": sandbox.FormatID(cut)})
	if resp == nil {
		t.Fatal("resume below pruned_through opened a stream")
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusGone; got != want {
		t.Fatalf("status %d, want %d", got, want)
	}
}

func TestStreamKeepalive(t *testing.T) {
	h := newHarness(t, options{keepalive: 5 * time.Millisecond})
	c := h.createSandbox()
	s := h.openStream(c.ID, "", nil)
	s.snapshot()
	// A quiet stream keeps pinging: the keepalive is set again after each.
	for pings := 0; pings < 3; {
		f := s.next()
		if f.isNote {
			if got, want := f.comment, "ping"; got != want {
				t.Fatalf("comment %q, want %q", got, want)
			}
			pings++
		}
	}
}

func TestStreamStatus(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	s := h.openStream(c.ID, "", nil)
	if got, want := s.snapshot().Sandbox.Status, sandbox.StatusReady; got != want {
		t.Fatalf("snapshot status %q, want %q", got, want)
	}
	h.ok(http.MethodDelete, "/v1/sandboxes/"+c.ID, nil, http.StatusOK, nil)
	f := s.nextEvent()
	if got, want := f.event, string(sandbox.TypeSandboxStatus); got != want {
		t.Fatalf("event %q, want %q", got, want)
	}
	if f.hasID {
		t.Fatalf("status frame has an id line %q", f.id)
	}
	ev := decodeEnvelope(t, f.data)
	st, ok := ev.Data.(*sandbox.SandboxStatus)
	if !ok || ev.ID != 0 {
		t.Fatalf("status frame %s", f.data)
	}
	if got, want := st.Status, sandbox.StatusDeleted; got != want {
		t.Fatalf("status %q, want %q", got, want)
	}
	// A deleted sandbox keeps its stream: its log is still readable.
	live := h.appendMessages(c.ID, 1, 10)
	s.expectIDs(live)
}

func TestStreamReconnect(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	const total = 600
	h.appendMessages(c.ID, 100, 10)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, 0)
	for n := 100; n < total; {
		k := min(1+rng.IntN(20), total-n)
		sizes = append(sizes, k)
		n += k
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, k := range sizes {
			evs := make([]*sandbox.Event, k)
			for i := range evs {
				evs[i] = &sandbox.Event{Type: sandbox.TypeToolUpdated, Data: &sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "t", Kind: "read", Status: "running"}}
			}
			if err := h.coord.AppendEvents(context.Background(), c.ID, evs...); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()

	var got []uint64
	var cursor uint64
	for conns := 0; len(got) < total; conns++ {
		header := map[string]string{}
		if cursor > 0 {
			header["Last-Event-ID"] = sandbox.FormatID(cursor)
		}
		s := h.openStream(c.ID, "since=0", header)
		s.snapshot()
		for k := rng.IntN(40); k > 0 && len(got) < total; k-- {
			id := s.durable()
			if id <= cursor {
				t.Fatalf("connection %d: id %d after cursor %d", conns, id, cursor)
			}
			got, cursor = append(got, id), id
		}
		s.close()
	}
	wg.Wait()
	if got, want := got, h.logIDs(c.ID); !slices.Equal(got, want) {
		t.Fatalf("resumed stream delivered %d ids, log has %d: gap or duplicate", len(got), len(want))
	}
}

func waitClosed(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("not signalled within %v", waitFor)
	}
}

func readAll(resp *http.Response) ([]byte, error) {
	var v json.RawMessage
	err := json.NewDecoder(resp.Body).Decode(&v)
	return v, err
}

// closedStreams tells of each stream that ended.
type closedStreams struct {
	nopObserver
	ch chan struct{}
}

func (o closedStreams) StreamClosed() { o.ch <- struct{}{} }

// rawResponse reads the head of the answer on a raw stream connection
// (rawStream) and returns it with a parser of its body, past the snapshot.
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

// TestStreamHTTP11: a stream over HTTP/1.1 is a chunked body any HTTP
// client reads: the headers the server set, and frames smaller and larger
// than smallFrame.
func TestStreamHTTP11(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	resp, p := rawResponse(t, h, c.ID)
	if got := resp.TransferEncoding; len(got) != 1 || got[0] != "chunked" {
		t.Fatalf("Transfer-Encoding %v, want chunked", got)
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

// TestStreamClientLeaves: a client that closes its connection ends its
// stream at once, not at the next keepalive (an hour here).
func TestStreamClientLeaves(t *testing.T) {
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

// TestShutdownEndsStreams: Shutdown ends the streams of the server it
// serves and returns only once they have ended, each body with its last
// chunk.
func TestShutdownEndsStreams(t *testing.T) {
	obs := closedStreams{ch: make(chan struct{}, 4)}
	h := newHarness(t, options{})
	c := h.createSandbox()
	srv := New(Config{Backend: h.be, Store: h.reads, Token: testToken, Observer: obs})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	other := *h
	other.url = "http://" + l.Addr().String()
	_, p := rawResponse(t, &other, c.ID)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case <-obs.ch:
	default:
		t.Fatal("Shutdown returned before the stream ended")
	}
	for {
		_, err := p.next()
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the body ended with %v, want io.EOF after its last chunk", err)
		}
		break
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after Shutdown")
	}
}
