package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/apitest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// These tests hold the OpenAPI document (server/openapi.json) to the real
// server: the server as `sparkles serve` wires it (Main), the demo agent as
// its own process, driven through every route, every error answer it can
// give here and every event type. Each answer, each page and each SSE
// frame is validated against the document with its answer schemas closed,
// so a field, a status, an event type or a value the document does not
// describe fails the test, as does one it describes wrongly. Then the
// document is broken on purpose, one part at a time, and each broken
// document must fail some of the recorded answers: proof that those parts
// are checked at all.

const openAPIToken = "openapi-test-token"

// Ids of the right shape that name nothing.
const (
	noSandbox  = "c_00000000000000000000000000"
	noTurn     = "turn_00000000000000000000000000"
	noApproval = "appr_00000000000000000000000000"
)

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

func TestOpenAPIConformance(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := apitest.Closed(file)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := apitest.Load(closed)
	if err != nil {
		t.Fatal(err)
	}
	m := &Main{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: openAPIToken, Logger: slog.New(slog.DiscardHandler),
		Agents: map[string][]string{
			"demo": {binary, "agent", "demo"},
			// An agent whose command is not there: its sandboxes fail to boot.
			"broken": {filepath.Join(t.TempDir(), "no-such-agent")},
		},
		DefaultAgent: "demo",
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	r := &apiRecorder{t: t, spec: spec, base: "http://" + m.Listener.Addr().String(), hc: &http.Client{Timeout: 30 * time.Second}, pageTypes: map[string]bool{}, unrouted: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	A := apitest.Accepted

	// The served document is the one in the tree.
	if got := r.want(200, call{name: "openapi", judge: A, method: "GET", path: "/v1/openapi.json"}, nil); !bytes.Equal(got, file) {
		t.Fatal("GET /v1/openapi.json is not server/openapi.json")
	}
	r.want(200, call{name: "healthz", judge: A, method: "GET", path: "/healthz", token: "-"}, nil)
	r.want(200, call{name: "readyz", judge: A, method: "GET", path: "/readyz", token: "-"}, nil)
	r.want(200, call{name: "metrics", judge: A, method: "GET", path: "/metrics"}, nil)
	// GET /v1/agents is in the document ahead of the router (see
	// awaitedRoutes in server): checked once it answers.
	if status, _ := r.unchecked(call{name: "agents", method: "GET", path: "/v1/agents"}); status == http.StatusNotFound {
		t.Log("GET /v1/agents is not routed yet; its answer is not checked")
		r.unrouted["GET /v1/agents"] = true
	} else {
		r.do(call{name: "agents", judge: A, method: "GET", path: "/v1/agents"})
	}

	// A sandbox of the demo agent, followed from its first event.
	var sb created
	r.want(201, call{name: "create", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{
		"metadata": map[string]string{"app": "openapi-test"}, "env": map[string]string{"GREETING": "hi"}, "secrets": map[string]string{"API_KEY": "sk-openapi-test-secret-0123456789"},
	})}, &sb)
	sbPath := "/v1/sandboxes/" + sb.ID
	s1 := r.stream(call{name: "stream since 0", judge: A, path: sbPath + "/events/stream?since=0"})
	s1.until(ctx, typeIs("snapshot"))

	// 1. A plain turn: messages, tools, the final message.
	var turn idOnly
	r.want(202, call{name: "turn", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, &turn)
	s1.until(ctx, turnCompleted(turn.ID))
	r.want(200, call{name: "get turn", judge: A, method: "GET", path: sbPath + "/turns/" + turn.ID}, nil)

	// 2. An approval, approved; answering it again is approval_resolved.
	r.want(202, call{name: "turn write", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "please write notes.txt"})}, &turn)
	evs := s1.until(ctx, typeIs("approval.requested"))
	appr := evs[len(evs)-1].field("approval_id")
	r.want(200, call{name: "approve", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "approve"})}, nil)
	r.want(409, call{name: "approve again", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "approve"})}, nil)
	s1.until(ctx, turnCompleted(turn.ID))

	// 3. An approval denied by its option id; malformed decisions first.
	r.want(202, call{name: "turn write 2", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "write denied.txt"})}, &turn)
	evs = s1.until(ctx, typeIs("approval.requested"))
	var req struct {
		ApprovalID string `json:"approval_id"`
		Options    []struct {
			OptionID string `json:"option_id"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(evs[len(evs)-1].Data, &req); err != nil {
		t.Fatal(err)
	}
	reject := ""
	for _, o := range req.Options {
		if o.Kind == "reject_once" {
			reject = o.OptionID
		}
	}
	apprPath := sbPath + "/approvals/" + req.ApprovalID
	r.want(400, call{name: "decision and option", judge: apitest.Refused, method: "POST", path: apprPath, body: jsonBody(map[string]string{"decision": "deny", "option_id": reject})}, nil)
	r.want(400, call{name: "decision unknown", judge: apitest.Refused, method: "POST", path: apprPath, body: jsonBody(map[string]string{"decision": "maybe"})}, nil)
	r.want(400, call{name: "decision empty", judge: apitest.Refused, method: "POST", path: apprPath, body: []byte(`{}`)}, nil)
	r.want(200, call{name: "deny by option", judge: A, method: "POST", path: apprPath, body: jsonBody(map[string]string{"option_id": reject})}, nil)
	s1.until(ctx, turnCompleted(turn.ID))

	// 4. An approval pending when its turn is canceled.
	r.want(202, call{name: "turn write 3", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "write pending.txt"})}, &turn)
	evs = s1.until(ctx, typeIs("approval.requested"))
	appr = evs[len(evs)-1].field("approval_id")
	r.want(202, call{name: "cancel at approval", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel"}, nil)
	s1.until(ctx, turnCompleted(turn.ID))
	r.want(409, call{name: "decide canceled", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "deny"})}, nil)

	// 5. A turn that hangs: another is refused while it runs; canceled.
	r.want(202, call{name: "turn hang", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hang"})}, &turn)
	s1.until(ctx, func(ev streamEvent) bool {
		return ev.Type == "message.updated" && strings.Contains(ev.field("text"), "Working on it")
	})
	r.want(409, call{name: "turn in progress", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.want(200, call{name: "sandbox with a turn", judge: A, method: "GET", path: sbPath}, nil)
	r.want(400, call{name: "cancel with a body", judge: apitest.Refused, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel", body: []byte(`{"now":true}`)}, nil)
	r.want(202, call{name: "cancel", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel", body: []byte(`{}`)}, nil)
	s1.until(ctx, turnCompleted(turn.ID))
	r.do(call{name: "cancel done turn", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel"})

	// 6. The agent crashes mid-turn: sandbox.error agent_exited.
	r.want(202, call{name: "turn crash", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "crash"})}, &turn)
	s1.until(ctx, typeIs("sandbox.error"))
	s1.until(ctx, turnCompleted(turn.ID))

	// Reads, pages and their errors.
	r.want(200, call{name: "sandbox", judge: A, method: "GET", path: sbPath}, nil)
	r.want(404, call{name: "no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox}, nil)
	r.want(404, call{name: "no turn", judge: A, method: "GET", path: sbPath + "/turns/" + noTurn}, nil)
	r.want(404, call{name: "cancel no turn", judge: A, method: "POST", path: sbPath + "/turns/" + noTurn + "/cancel"}, nil)
	r.want(404, call{name: "turn no sandbox", judge: A, method: "POST", path: "/v1/sandboxes/" + noSandbox + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.do(call{name: "decide no approval", judge: A, method: "POST", path: sbPath + "/approvals/" + noApproval, body: jsonBody(map[string]string{"decision": "approve"})})
	var page struct {
		HasMore   bool   `json:"has_more"`
		NextSince string `json:"next_since"`
		Last      string `json:"last_event_id"`
	}
	for since := "0"; ; since = page.NextSince {
		r.want(200, call{name: "events page", judge: A, method: "GET", path: sbPath + "/events?limit=7&since=" + since}, &page)
		if !page.HasMore {
			break
		}
	}
	r.want(200, call{name: "events header cursor", judge: A, method: "GET", path: sbPath + "/events", header: []string{"Last-Event-ID", "3"}}, nil)
	r.want(200, call{name: "events at the end", judge: A, method: "GET", path: sbPath + "/events?since=" + page.Last}, nil)
	r.want(410, call{name: "events stale", judge: A, method: "GET", path: sbPath + "/events?since=999999"}, nil)
	r.want(400, call{name: "events bad cursor", judge: apitest.Refused, method: "GET", path: sbPath + "/events?since=-1"}, nil)
	r.want(400, call{name: "events bad limit", judge: apitest.Refused, method: "GET", path: sbPath + "/events?limit=1001"}, nil)
	r.want(404, call{name: "events no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox + "/events"}, nil)
	r.want(410, call{name: "stream stale", judge: A, method: "GET", path: sbPath + "/events/stream", header: []string{"Last-Event-ID", "999999"}}, nil)
	r.want(400, call{name: "stream bad cursor", judge: apitest.Refused, method: "GET", path: sbPath + "/events/stream?since=x"}, nil)
	r.want(404, call{name: "stream no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox + "/events/stream"}, nil)

	// The stream token reads its sandbox and nothing else.
	st := sb.StreamToken
	r.want(200, call{name: "stream token: sandbox", judge: A, method: "GET", path: sbPath, token: st}, nil)
	r.want(200, call{name: "stream token: events", judge: A, method: "GET", path: sbPath + "/events", token: st}, nil)
	live := r.stream(call{name: "stream token: stream", judge: A, path: sbPath + "/events/stream", token: st})
	live.until(ctx, typeIs("snapshot"))
	live.cancel()
	r.want(403, call{name: "stream token: turn", judge: apitest.Unjudged, method: "POST", path: sbPath + "/turns", token: st, body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.want(403, call{name: "stream token: list", judge: apitest.Unjudged, method: "GET", path: "/v1/sandboxes", token: st}, nil)
	r.want(403, call{name: "stream token: other sandbox", judge: apitest.Unjudged, method: "GET", path: "/v1/sandboxes/" + noSandbox, token: st}, nil)
	r.want(403, call{name: "stream token: document", judge: apitest.Unjudged, method: "GET", path: "/v1/openapi.json", token: st}, nil)

	// Without a token, or with a wrong one.
	r.want(401, call{name: "no token", judge: apitest.Refused, method: "GET", path: "/v1/sandboxes", token: "-"}, nil)
	r.want(401, call{name: "no token: document", judge: apitest.Refused, method: "GET", path: "/v1/openapi.json", token: "-"}, nil)
	r.want(401, call{name: "no token: metrics", judge: apitest.Refused, method: "GET", path: "/metrics", token: "-"}, nil)
	r.want(401, call{name: "no token: stream", judge: apitest.Refused, method: "GET", path: sbPath + "/events/stream", token: "-"}, nil)
	r.want(401, call{name: "wrong token", judge: apitest.Unjudged, method: "GET", path: sbPath, token: "not-the-token"}, nil)

	// Bodies the server refuses, and so does the document.
	r.want(400, call{name: "create unknown field", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: []byte(`{"agent":"demo","colour":"red"}`)}, nil)
	r.want(400, call{name: "create bad env", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{"env": map[string]string{"1BAD": "x"}})}, nil)
	r.want(400, call{name: "create unknown agent", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]string{"agent": "nope"})}, nil)
	r.want(415, call{name: "create text body", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: []byte(`{}`), header: []string{"Content-Type", "text/plain"}}, nil)
	r.want(413, call{name: "create huge body", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{"metadata": map[string]string{"big": strings.Repeat("x", 2<<20)}})}, nil)
	r.want(413, call{name: "turn huge body", judge: apitest.Unjudged, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": strings.Repeat("x", 2<<20)})}, nil)
	r.want(400, call{name: "turn no input", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: []byte(`{}`)}, nil)
	r.want(400, call{name: "turn blank input", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": " \n"})}, nil)
	r.want(400, call{name: "turn unknown field", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]any{"input": "hi", "model": "x"})}, nil)
	r.want(400, call{name: "list bad limit", judge: apitest.Refused, method: "GET", path: "/v1/sandboxes?limit=0"}, nil)

	// Answers that no operation describes: a wrong method, no such path.
	status, body := r.unchecked(call{name: "wrong method", method: "PUT", path: "/v1/sandboxes"})
	if status != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /v1/sandboxes = %d %s, want 405", status, body)
	}
	r.checkSchema("BadRequestError", body)
	status, body = r.unchecked(call{name: "no route", method: "GET", path: "/v1/nothing-here"})
	if status != http.StatusNotFound {
		t.Fatalf("GET /v1/nothing-here = %d %s, want 404", status, body)
	}
	r.checkSchema("NotFoundError", body)

	// A sandbox whose agent cannot start: sandbox.error outside any turn.
	var broken created
	r.want(201, call{name: "create broken", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]string{"agent": "broken"})}, &broken)
	s2 := r.stream(call{name: "stream broken", judge: A, path: "/v1/sandboxes/" + broken.ID + "/events/stream?since=0"})
	s2.until(ctx, typeIs("sandbox.error"))
	s2.cancel()

	// Lists, paged.
	var list struct {
		Data    []idOnly `json:"data"`
		HasMore bool     `json:"has_more"`
	}
	r.want(200, call{name: "list", judge: A, method: "GET", path: "/v1/sandboxes?limit=1"}, &list)
	if !list.HasMore || len(list.Data) != 1 {
		t.Fatalf("GET /v1/sandboxes?limit=1: %+v, want one sandbox and more", list)
	}
	r.want(200, call{name: "list after", judge: A, method: "GET", path: "/v1/sandboxes?after=" + list.Data[0].ID}, nil)

	// Delete: the stream sees the status; a deleted sandbox takes no turn.
	r.want(200, call{name: "delete", judge: A, method: "DELETE", path: sbPath}, nil)
	s1.until(ctx, func(ev streamEvent) bool { return ev.Type == "sandbox.status" && ev.field("status") == "deleted" })
	s1.cancel()
	r.want(200, call{name: "delete again", judge: A, method: "DELETE", path: sbPath}, nil)
	r.want(409, call{name: "turn on deleted", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.want(404, call{name: "delete no sandbox", judge: A, method: "DELETE", path: "/v1/sandboxes/" + noSandbox}, nil)

	// Retention passes the cursor: cursor_pruned, page and stream.
	if _, err := m.Store.Prune(ctx, sb.ID, 5, 0); err != nil {
		t.Fatal(err)
	}
	r.want(410, call{name: "events pruned", judge: A, method: "GET", path: sbPath + "/events?since=2"}, nil)
	r.want(410, call{name: "stream pruned", judge: A, method: "GET", path: sbPath + "/events/stream", header: []string{"Last-Event-ID", "2"}}, nil)
	r.want(200, call{name: "events after pruning", judge: A, method: "GET", path: sbPath + "/events?since=0&limit=3"}, nil)
	replay := r.stream(call{name: "stream after pruning", judge: A, path: sbPath + "/events/stream?since=0"})
	replay.until(ctx, typeIs("turn.completed"))
	replay.cancel()

	// Not ready, then broken: 503 from /readyz, 500 from the API.
	if err := m.Retainer.Close(); err != nil {
		t.Fatal(err)
	}
	r.want(503, call{name: "readyz not ready", judge: A, method: "GET", path: "/readyz", token: "-"}, nil)
	if err := m.Store.Close(); err != nil {
		t.Fatal(err)
	}
	m.Retainer, m.Store = nil, nil // closed; /readyz is not asked again
	r.want(500, call{name: "store closed", judge: A, method: "GET", path: "/v1/sandboxes"}, nil)

	if t.Failed() {
		return
	}
	checkCoverage(t, r)
	checkBrokenDocuments(t, r, file)
}

// checkCoverage fails when an operation, an event type or an error status
// went unexercised, so the test cannot quietly stop covering one.
func checkCoverage(t *testing.T, r *apiRecorder) {
	t.Helper()
	ops := r.spec.Operations()
	seen := map[string]map[int]bool{}
	for _, ex := range r.exchanges {
		op := operationOf(ops, ex.Method, pathOf(ex.URL))
		if seen[op] == nil {
			seen[op] = map[int]bool{}
		}
		seen[op][ex.Status] = true
	}
	for _, op := range ops {
		ok := false
		for status := range seen[op] {
			ok = ok || status < 300
		}
		if !ok && !r.unrouted[op] {
			t.Errorf("no successful answer of %s was validated", op)
		}
	}
	statuses := map[int]bool{}
	for _, m := range seen {
		for s := range m {
			statuses[s] = true
		}
	}
	for _, s := range []int{400, 401, 403, 404, 409, 410, 413, 415, 500, 503} {
		if !statuses[s] {
			t.Errorf("no %d answer was validated", s)
		}
	}
	streamed := map[string]bool{}
	for _, f := range r.frames {
		streamed[f.Event] = true
	}
	for _, typ := range []sandbox.Type{sandbox.TypeSnapshot, sandbox.TypeSandboxStatus} {
		if !streamed[string(typ)] {
			t.Errorf("no %s frame was validated", typ)
		}
	}
	for _, typ := range sandbox.DurableTypes {
		if !streamed[string(typ)] {
			t.Errorf("no %s frame was validated", typ)
		}
		if !r.pageTypes[string(typ)] {
			t.Errorf("no events page with a %s event was validated", typ)
		}
	}
	var lines []string
	for op, m := range seen {
		var codes []string
		for s := range m {
			codes = append(codes, fmt.Sprint(s))
		}
		slices.Sort(codes)
		lines = append(lines, op+": "+strings.Join(codes, " "))
	}
	slices.Sort(lines)
	t.Logf("validated %d answers, %d frames:\n%s", len(r.exchanges), len(r.frames), strings.Join(lines, "\n"))
}

// operationOf names the operation of the document that answers a request.
func operationOf(ops []string, method, path string) string {
	for _, op := range ops {
		m, tmpl, _ := strings.Cut(op, " ")
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + "$"
		if m == method && regexp.MustCompile(re).MatchString(path) {
			return op
		}
	}
	return method + " " + path
}

// failsOn reports whether a document fails any recorded answer or frame.
func (r *apiRecorder) failsOn(spec *apitest.Spec) bool {
	for _, ex := range r.exchanges {
		if spec.Check(ex) != nil {
			return true
		}
	}
	for _, f := range r.frames {
		if spec.CheckFrame(f) != nil {
			return true
		}
	}
	for _, c := range r.schemas {
		if spec.CheckSchema(c.schema, c.body) != nil {
			return true
		}
	}
	return false
}

// checkBrokenDocuments breaks the document one part at a time; each broken
// document must fail some recorded answer, frame or body. Each mutation
// proves that the part it breaks is held to the server's real output.
func checkBrokenDocuments(t *testing.T, r *apiRecorder, file []byte) {
	t.Helper()
	schemas := func(d map[string]any) map[string]any {
		return apitest.Lookup(d, "components", "schemas").(map[string]any)
	}
	schema := func(d map[string]any, name string) map[string]any { return schemas(d)[name].(map[string]any) }
	props := func(d map[string]any, name string) map[string]any {
		return schema(d, name)["properties"].(map[string]any)
	}
	requireField := func(name string) func(map[string]any) {
		return func(d map[string]any) {
			s := schema(d, name)
			s["required"] = append(s["required"].([]any), "undocumented")
			props(d, name)["undocumented"] = map[string]any{"type": "string"}
		}
	}
	dropEnum := func(name, prop, value string) func(map[string]any) {
		return func(d map[string]any) {
			p := props(d, name)[prop].(map[string]any)
			p["enum"] = slices.DeleteFunc(p["enum"].([]any), func(v any) bool { return v == value })
		}
	}
	dropProp := func(name, prop string) func(map[string]any) {
		return func(d map[string]any) {
			delete(props(d, name), prop)
			s := schema(d, name)
			s["required"] = slices.DeleteFunc(s["required"].([]any), func(v any) bool { return v == prop })
		}
	}
	mutations := map[string]func(map[string]any){
		// Each event type's own data schema is what its events are held to.
		"snapshot data":           requireField("Snapshot"),
		"sandbox.status data":     requireField("SandboxStatus"),
		"turn.started data":       requireField("TurnStarted"),
		"turn.completed data":     requireField("TurnCompleted"),
		"message.updated data":    requireField("MessageUpdated"),
		"message.completed data":  requireField("MessageCompleted"),
		"tool.updated data":       requireField("ToolUpdated"),
		"approval.requested data": requireField("ApprovalRequested"),
		"approval.resolved data":  requireField("ApprovalResolved"),
		"sandbox.error data":      requireField("SandboxError"),
		// A type missing from the oneOf.
		"no message.completed variant": func(d map[string]any) {
			for _, name := range []string{"Event", "DurableEvent"} {
				s := schema(d, name)
				s["oneOf"] = slices.DeleteFunc(s["oneOf"].([]any), func(v any) bool {
					return v.(map[string]any)["$ref"] == "#/components/schemas/MessageCompletedEvent"
				})
				delete(s["discriminator"].(map[string]any)["mapping"].(map[string]any), "message.completed")
			}
		},
		// Values the server sends.
		"no canceled turns":      dropEnum("TurnCompleted", "status", "canceled"),
		"no turn_canceled":       dropEnum("ApprovalResolved", "reason", "turn_canceled"),
		"no agent_start_failed":  func(d map[string]any) { dropFrom(schema(d, "SandboxErrorCode"), "agent_start_failed") },
		"no deleted status":      func(d map[string]any) { dropFrom(schema(d, "SandboxStatusValue"), "deleted") },
		"two-digit milliseconds": func(d map[string]any) { schema(d, "Timestamp")["pattern"] = `^[0-9-]{10}T[0-9:]{8}\.[0-9]{2}Z$` },
		"transient ids": func(d map[string]any) {
			props(d, "SnapshotEvent")["id"] = map[string]any{"$ref": "#/components/schemas/EventID"}
		},
		// Fields of the resources and of the error bodies.
		"no status_detail": dropProp("Sandbox", "status_detail"),
		"no stream_token":  dropProp("CreatedSandbox", "stream_token"),
		"no watermarks in 410": func(d map[string]any) {
			e := props(d, "CursorError")["error"].(map[string]any)
			delete(e["properties"].(map[string]any), "pruned_through")
			e["required"] = slices.DeleteFunc(e["required"].([]any), func(v any) bool { return v == "pruned_through" })
		},
		"no page cursor": dropProp("EventPage", "next_since"),
		// Statuses and media types.
		"no 410 on the events page": func(d map[string]any) {
			delete(apitest.Lookup(d, "paths", "/v1/sandboxes/{id}/events", "get", "responses").(map[string]any), "410")
		},
		"no 409 on decisions": func(d map[string]any) {
			delete(apitest.Lookup(d, "paths", "/v1/sandboxes/{id}/approvals/{approval_id}", "post", "responses").(map[string]any), "409")
		},
		"stream answers JSON": func(d map[string]any) {
			c := apitest.Lookup(d, "paths", apitest.StreamPath, "get", "responses", "200", "content").(map[string]any)
			c["application/json"] = map[string]any{"schema": map[string]any{"type": "object"}}
			delete(c, "text/event-stream")
			c["application/json"].(map[string]any)[apitest.FrameExtension] = "#/components/schemas/Event"
		},
		"stream buffered": func(d map[string]any) {
			apitest.Lookup(d, "paths", apitest.StreamPath, "get", "responses", "200", "headers", "X-Accel-Buffering", "schema").(map[string]any)["const"] = "yes"
		},
		// Requests: what the server refuses, the document must refuse.
		"open turn body":   func(d map[string]any) { schema(d, "TurnRequest")["additionalProperties"] = true },
		"open create body": func(d map[string]any) { schema(d, "CreateSandboxRequest")["additionalProperties"] = true },
		"no security":      func(d map[string]any) { d["security"] = []any{} },
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range mutations {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		broken, err := apitest.Mutated(file, mutations[name])
		if err == nil {
			broken, err = apitest.Closed(broken)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		spec, err := apitest.Load(broken)
		if err != nil {
			t.Errorf("broken document %q does not load: %v", name, err)
			continue
		}
		if !r.failsOn(spec) {
			t.Errorf("broken document %q passes every recorded answer: that part of the document is not checked", name)
		}
	}
}

// dropFrom removes value from a schema's enum.
func dropFrom(s map[string]any, value string) {
	s["enum"] = slices.DeleteFunc(s["enum"].([]any), func(v any) bool { return v == value })
}
