package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/apitest"
)

// The recorder of TestOpenAPIConformance: it calls the API and reads
// streams, validates every answer and frame as it comes, and keeps them for
// the checks against broken documents (openapi_checks_test.go).
// apiRecorder calls the API, validates every answer as it comes and keeps
// it for the checks against broken documents.
type apiRecorder struct {
	t    *testing.T
	spec *apitest.Spec
	base string
	hc   *http.Client

	mu        sync.Mutex
	exchanges []*apitest.Exchange
	frames    []apitest.Frame
	schemas   []schemaCheck // answers that no operation describes
	pageTypes map[string]bool
	unrouted  map[string]bool // operations of the document ahead of the router
}

type schemaCheck struct {
	schema string
	body   []byte
}

type call struct {
	name   string
	judge  apitest.Judgement
	method string
	path   string
	token  string // "-" for none
	body   []byte
	header []string // name, value pairs
}

// do sends c, validates the exchange and returns its status and body.
func (r *apiRecorder) do(c call) (int, []byte) {
	r.t.Helper()
	resp, ex := r.send(c)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		r.t.Fatalf("%s: read answer: %v", c.name, err)
	}
	ex.RBody = b
	r.keep(ex)
	return ex.Status, b
}

// want is do for a call that must answer status.
func (r *apiRecorder) want(status int, c call, out any) []byte {
	r.t.Helper()
	got, b := r.do(c)
	if got != status {
		r.t.Fatalf("%s: %s %s = %d %s, want %d", c.name, c.method, c.path, got, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("%s: decode %s: %v", c.name, b, err)
		}
	}
	return b
}

// unchecked sends c and keeps nothing: for answers that no operation
// describes, which the caller checks against a schema.
func (r *apiRecorder) unchecked(c call) (int, []byte) {
	r.t.Helper()
	resp, _ := r.send(c)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s: read answer: %v", c.name, err)
	}
	return resp.StatusCode, b
}

func (r *apiRecorder) send(c call) (*http.Response, *apitest.Exchange) {
	r.t.Helper()
	req, err := http.NewRequest(c.method, r.base+c.path, bytes.NewReader(c.body))
	if err != nil {
		r.t.Fatal(err)
	}
	if c.body == nil {
		req.Body = http.NoBody
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	switch c.token {
	case "":
		req.Header.Set("Authorization", "Bearer "+openAPIToken)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	ex := &apitest.Exchange{Name: c.name, Judge: c.judge, Method: c.method, URL: req.URL.String(), Header: req.Header.Clone(), Body: c.body}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatalf("%s: %s %s: %v", c.name, c.method, c.path, err)
	}
	ex.Status, ex.RHeader = resp.StatusCode, resp.Header.Clone()
	return resp, ex
}

func (r *apiRecorder) keep(ex *apitest.Exchange) {
	r.t.Helper()
	if err := r.spec.Check(ex); err != nil {
		r.t.Error(err)
	}
	if ex.Status == http.StatusOK && strings.HasSuffix(pathOf(ex.URL), "/events") {
		var page struct {
			Data []struct {
				Type string `json:"type"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ex.RBody, &page); err == nil {
			r.mu.Lock()
			for _, ev := range page.Data {
				r.pageTypes[ev.Type] = true
			}
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, ex)
	r.mu.Unlock()
}

// checkSchema validates an answer that no operation describes.
func (r *apiRecorder) checkSchema(schema string, body []byte) {
	r.t.Helper()
	if err := r.spec.CheckSchema(schema, body); err != nil {
		r.t.Error(err)
	}
	r.mu.Lock()
	r.schemas = append(r.schemas, schemaCheck{schema, body})
	r.mu.Unlock()
}

// sseStream is an open stream whose frames are validated as they come.
type sseStream struct {
	r      *apiRecorder
	cancel context.CancelFunc
	frames chan apitest.Frame
	errc   chan error
}

// stream opens c (a stream request that must answer 200) and reads its
// frames in the background.
func (r *apiRecorder) stream(c call) *sseStream {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+c.path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	tok := openAPIToken
	if c.token != "" {
		tok = c.token
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		cancel()
		r.t.Fatalf("%s: %v", c.name, err)
	}
	ex := &apitest.Exchange{Name: c.name, Judge: c.judge, Method: http.MethodGet, URL: req.URL.String(), Header: req.Header.Clone(),
		Status: resp.StatusCode, RHeader: resp.Header.Clone(), Streamed: true}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		r.t.Fatalf("%s: stream answered %d %s", c.name, resp.StatusCode, b)
	}
	r.keep(ex)
	s := &sseStream{r: r, cancel: cancel, frames: make(chan apitest.Frame, 1024), errc: make(chan error, 1)}
	go func() {
		defer resp.Body.Close()
		s.errc <- readFrames(resp.Body, s.frames)
	}()
	r.t.Cleanup(cancel)
	return s
}

// readFrames parses SSE as the HTML standard does, keeping whether a
// message had an id field at all.
func readFrames(body io.Reader, out chan<- apitest.Frame) error {
	defer close(out)
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 8<<20)
	var f apitest.Frame
	var data []string
	hasData := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData {
				f.Data = []byte(strings.Join(data, "\n"))
				out <- f
			}
			f, data, hasData = apitest.Frame{}, nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			f.ID, f.HasID = value, true
		case "event":
			f.Event = value
		case "data":
			data, hasData = append(data, value), true
		}
	}
	return sc.Err()
}

// until reads frames until one satisfies done, validating and keeping
// each; it returns the envelopes read.
func (s *sseStream) until(ctx context.Context, done func(ev streamEvent) bool) []streamEvent {
	s.r.t.Helper()
	var out []streamEvent
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				s.r.t.Fatalf("the stream ended (%v) before the frame awaited; read %d", <-s.errc, len(out))
			}
			if err := s.r.spec.CheckFrame(f); err != nil {
				s.r.t.Error(err)
			}
			s.r.mu.Lock()
			s.r.frames = append(s.r.frames, f)
			s.r.mu.Unlock()
			var ev streamEvent
			if err := json.Unmarshal(f.Data, &ev); err != nil {
				s.r.t.Fatalf("frame %s: %v", f.Data, err)
			}
			out = append(out, ev)
			if done(ev) {
				return out
			}
		case <-ctx.Done():
			s.r.t.Fatalf("no awaited frame: %v; read %d", ctx.Err(), len(out))
		}
	}
}

// streamEvent is what the scenario reads of an envelope; the document
// checked the rest.
type streamEvent struct {
	ID     *string         `json:"id"`
	Type   string          `json:"type"`
	TurnID *string         `json:"turn_id"`
	Data   json.RawMessage `json:"data"`
}

func (ev streamEvent) field(name string) string {
	var m map[string]any
	_ = json.Unmarshal(ev.Data, &m)
	s, _ := m[name].(string)
	return s
}

func typeIs(typ string) func(streamEvent) bool {
	return func(ev streamEvent) bool { return ev.Type == typ }
}

func turnCompleted(turnID string) func(streamEvent) bool {
	return func(ev streamEvent) bool {
		return ev.Type == "turn.completed" && ev.TurnID != nil && *ev.TurnID == turnID
	}
}

func pathOf(u string) string {
	_, rest, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
	p, _, _ := strings.Cut("/"+rest, "?")
	return p
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type created struct {
	ID          string `json:"id"`
	StreamToken string `json:"stream_token"`
}

type idOnly struct {
	ID string `json:"id"`
}
