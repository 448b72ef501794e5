package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// frame is one dispatched SSE event, or one comment line when comment is set.
type frame struct {
	id      string
	hasID   bool
	event   string
	data    string
	comment string
	isNote  bool // a comment line rather than an event
}

// sseParser reads frames as the SSE specification parses them: lines end
// in "\n" or "\r\n", a blank line dispatches, ":" starts a comment, one
// space after the colon is dropped, data lines join with "\n".
type sseParser struct {
	br *bufio.Reader
	// The event being built survives comment lines, which are returned on
	// their own in the middle of it.
	cur     frame
	data    strings.Builder
	hasData bool
}

func newSSEParser(r io.Reader) *sseParser { return &sseParser{br: bufio.NewReaderSize(r, 64<<10)} }

func (p *sseParser) next() (frame, error) {
	for {
		line, err := p.br.ReadString('\n')
		if err != nil {
			return frame{}, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			f, ok := p.cur, p.hasData
			f.data = strings.TrimSuffix(p.data.String(), "\n")
			p.cur, p.hasData = frame{}, false
			p.data.Reset()
			if ok {
				return f, nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			return frame{isNote: true, comment: strings.TrimPrefix(line[1:], " ")}, nil
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			p.cur.id, p.cur.hasID = value, true
		case "event":
			p.cur.event = value
		case "data":
			p.data.WriteString(value)
			p.data.WriteByte('\n')
			p.hasData = true
		}
	}
}

// stream is an open SSE connection read in the background; frames arrive on
// a channel so a test waits on them with a deadline.
type stream struct {
	t      testing.TB
	resp   *http.Response
	frames chan frame
	done   chan struct{} // closed when the reader ends
	err    error         // the reader's final error, valid after done
	cancel context.CancelFunc
}

const waitFor = 10 * time.Second

// openStream connects to the stream of sandbox id and fails the test unless
// it answers 200 text/event-stream.
func (h *harness) openStream(id, query string, header map[string]string) *stream {
	h.t.Helper()
	s, resp := h.tryStream(id, query, header)
	if resp != nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.t.Fatalf("stream %s?%s: status %d: %s", id, query, resp.StatusCode, body)
	}
	return s
}

// tryStream connects to a stream; on any status but 200 it returns the
// response to inspect instead.
func (h *harness) tryStream(id, query string, header map[string]string) (*stream, *http.Response) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := h.url + "/v1/sandboxes/" + id + "/events/stream"
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		h.t.Fatalf("stream %s: %v", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		return nil, resp
	}
	if got, want := resp.Header.Get("Content-Type"), "text/event-stream"; got != want {
		cancel()
		h.t.Fatalf("stream Content-Type = %q, want %q", got, want)
	}
	s := &stream{t: h.t, resp: resp, frames: make(chan frame, 64), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.done)
		p := newSSEParser(resp.Body)
		for {
			f, err := p.next()
			if err != nil {
				s.err = err
				return
			}
			select {
			case s.frames <- f:
			case <-ctx.Done():
				s.err = ctx.Err()
				return
			}
		}
	}()
	h.t.Cleanup(s.close)
	return s, nil
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
	<-s.done
}

// next returns the next frame, comments included.
func (s *stream) next() frame {
	s.t.Helper()
	select {
	case f := <-s.frames:
		return f
	case <-s.done:
		select {
		case f := <-s.frames:
			return f
		default:
		}
		s.t.Fatalf("stream ended: %v", s.err)
	case <-time.After(waitFor):
		s.t.Fatalf("no frame within %v", waitFor)
	}
	return frame{}
}

// nextEvent returns the next frame that is not a comment.
func (s *stream) nextEvent() frame {
	s.t.Helper()
	for {
		if f := s.next(); !f.isNote {
			return f
		}
	}
}

// ended waits for the server to end the stream and returns the reader's
// final error; frames still in flight are discarded.
func (s *stream) ended() error {
	s.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case <-s.frames:
		case <-s.done:
			return s.err
		case <-deadline:
			s.t.Fatalf("stream still open after %v", waitFor)
		}
	}
}

// snapshot reads the first frame and checks it is a snapshot without an id.
func (s *stream) snapshot() sandbox.Snapshot {
	s.t.Helper()
	f := s.nextEvent()
	if got, want := f.event, "snapshot"; got != want {
		s.t.Fatalf("first frame event = %q, want %q", got, want)
	}
	if f.hasID {
		s.t.Fatalf("snapshot frame has an id line %q", f.id)
	}
	ev := decodeEnvelope(s.t, f.data)
	if ev.ID != 0 {
		s.t.Fatalf("snapshot envelope id = %d, want null", ev.ID)
	}
	snap, ok := ev.Data.(*sandbox.Snapshot)
	if !ok {
		s.t.Fatalf("snapshot data is %T", ev.Data)
	}
	return *snap
}

// durable reads the next frame and checks it is a durable event whose id
// line matches its envelope.
func (s *stream) durable() uint64 {
	s.t.Helper()
	f := s.nextEvent()
	if !f.hasID {
		s.t.Fatalf("durable frame %q has no id line", f.event)
	}
	// Only the envelope's id and type are compared; decoding the payloads of
	// thousands of frames would only slow the tests.
	var env struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(f.data), &env); err != nil {
		s.t.Fatalf("frame data %.200q: %v", f.data, err)
	}
	if got, want := env.ID, f.id; got != want {
		s.t.Fatalf("envelope id %s, id line %s", got, want)
	}
	if got, want := env.Type, f.event; got != want {
		s.t.Fatalf("envelope type %s, event line %s", got, want)
	}
	id, err := strconv.ParseUint(f.id, 10, 64)
	if err != nil {
		s.t.Fatalf("id line %q: %v", f.id, err)
	}
	return id
}

func decodeEnvelope(t testing.TB, data string) sandbox.Event {
	t.Helper()
	var ev sandbox.Event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("frame data %.200q: %v", data, err)
	}
	return ev
}

func TestSSEParser(t *testing.T) {
	in := ": hello\n\nid: 7\r\nevent: x\ndata: a\ndata:b\n\ndata: lone\n\nevent: nothing\n\n"
	p := newSSEParser(strings.NewReader(in))
	want := []frame{
		{isNote: true, comment: "hello"},
		{id: "7", hasID: true, event: "x", data: "a\nb"},
		{data: "lone"},
	}
	for i, w := range want {
		got, err := p.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got != w {
			t.Fatalf("frame %d = %+v, want %+v", i, got, w)
		}
	}
	if _, err := p.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after last frame: err = %v, want EOF", err)
	}
}

func TestWriteFrame(t *testing.T) {
	for _, tt := range []struct {
		name string
		rec  sandbox.Record
		want string
	}{
		{"OK", sandbox.Record{ID: 42, Type: "turn.started", JSON: []byte(`{"a":1}`)},
			"id: 42\nevent: turn.started\ndata: {\"a\":1}\n\n"},
		{"MultiLine", sandbox.Record{ID: 1, Type: "t", JSON: []byte("{\n\"a\":1\r\n}\r")},
			"id: 1\nevent: t\ndata: {\ndata: \"a\":1\ndata: }\ndata: \n\n"},
		{"EventNameLineBreak", sandbox.Record{ID: 3, Type: "a\nid: 9", JSON: []byte(`{}`)},
			"id: 3\nevent: aid: 9\ndata: {}\n\n"},
		{"Large", sandbox.Record{ID: 5, Type: "t", JSON: bytes.Repeat([]byte("x"), smallFrame+1)},
			"id: 5\nevent: t\ndata: " + strings.Repeat("x", smallFrame+1) + "\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFrame(&buf, tt.rec); err != nil {
				t.Fatal(err)
			}
			if got, want := buf.String(), tt.want; got != want {
				t.Fatalf("frame = %q, want %q", got, want)
			}
		})
	}
}
