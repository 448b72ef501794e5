package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// canaryClient calls the API over HTTP and keeps every answer body, and
// every frame of the streams it follows, for a search at the end.
type canaryClient struct {
	t     *testing.T
	base  string
	token string

	mu      sync.Mutex
	answers []string // "METHOD path: body"
	types   map[sandbox.Type]bool
}

func (c *canaryClient) keep(what string, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers = append(c.answers, what+": "+string(body))
}

// do sends a request and keeps its answer; out, when not nil, gets it decoded.
func (c *canaryClient) do(method, path string, body any, want int, out any) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, r)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.keep(method+" "+path, b)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// follow reads the stream of sandbox id from the start until ctx ends,
// keeping every frame; each durable event goes to events as well, which is
// closed when the stream ends.
func (c *canaryClient) follow(ctx context.Context, id string, events chan<- sandbox.Event) {
	defer close(events)
	resp, err := openStream(ctx, http.DefaultClient, c.base, c.token, id, new(uint64))
	if err != nil {
		c.t.Errorf("stream: %v", err)
		return
	}
	defer resp.Body.Close()
	fr := newSSEFrames(resp.Body)
	for {
		f, err := fr.next()
		if err != nil {
			return
		}
		c.keep("stream "+f.event, f.data)
		c.mu.Lock()
		c.types[sandbox.Type(f.event)] = true
		c.mu.Unlock()
		var ev sandbox.Event
		if json.Unmarshal(f.data, &ev) == nil && ev.ID != 0 {
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// TestSecretsCanary puts a sandbox secret through every event type and
// every answer of the API: the demo agent echoes it from its environment,
// names a file after it, asks to write that file, and crashes with it in
// the prompt. Its value must appear in no event, no frame and no answer.
func TestSecretsCanary(t *testing.T) {
	const canary = "canary7f3b0e1dneverleaves"
	srv := sparklestest.Start(t, sparklestest.WithFlushInterval(5*time.Millisecond))
	c := &canaryClient{t: t, base: srv.URL, token: srv.Token, types: map[sandbox.Type]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var sb sandbox.Sandbox
	c.do(http.MethodPost, "/v1/sandboxes", map[string]any{
		"env":     map[string]string{"PLAIN": "visible-value"},
		"secrets": map[string]string{"API_KEY": canary},
	}, http.StatusCreated, &sb)
	sbPath := "/v1/sandboxes/" + sb.ID
	events := make(chan sandbox.Event, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.follow(ctx, sb.ID, events)
	}()
	next := func(turnID string, typ sandbox.Type) sandbox.Event {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before a %s of turn %s", typ, turnID)
				}
				if ev.Type == typ && (turnID == "" || ev.TurnID == turnID) {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no %s for turn %s", typ, turnID)
			}
		}
	}
	// getAll reads every GET answer of the sandbox, the given turns included.
	getAll := func(turns ...string) {
		c.do(http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, nil)
		c.do(http.MethodGet, sbPath, nil, http.StatusOK, nil)
		c.do(http.MethodGet, sbPath+"/events?since=0&limit=1000", nil, http.StatusOK, nil)
		for _, id := range turns {
			c.do(http.MethodGet, sbPath+"/turns/"+id, nil, http.StatusOK, nil)
		}
	}

	// A turn posted at once may be queued while the agent boots, and the
	// running one is answered from memory: both are read while they last.
	var turn sandbox.Turn
	c.do(http.MethodPost, sbPath+"/turns", map[string]string{"input": "slow: show me your env, " + canary}, http.StatusAccepted, &turn)
	getAll(turn.ID)
	next(turn.ID, sandbox.TypeMessageUpdated)
	getAll(turn.ID)
	next(turn.ID, sandbox.TypeTurnCompleted)
	getAll(turn.ID)

	for _, decision := range []string{"approve", "deny"} {
		c.do(http.MethodPost, sbPath+"/turns", map[string]string{"input": "please write " + canary + ".txt"}, http.StatusAccepted, &turn)
		appr := next(turn.ID, sandbox.TypeApprovalRequested).Data.(*sandbox.ApprovalRequested)
		getAll(turn.ID)
		c.do(http.MethodPost, sbPath+"/approvals/"+appr.ApprovalID, map[string]string{"decision": decision}, http.StatusOK, nil)
		next(turn.ID, sandbox.TypeTurnCompleted)
		getAll(turn.ID)
	}

	c.do(http.MethodPost, sbPath+"/turns", map[string]string{"input": "hang on " + canary}, http.StatusAccepted, &turn)
	next(turn.ID, sandbox.TypeMessageUpdated)
	c.do(http.MethodPost, sbPath+"/turns/"+turn.ID+"/cancel", nil, http.StatusAccepted, nil)
	next(turn.ID, sandbox.TypeTurnCompleted)
	getAll(turn.ID)

	c.do(http.MethodPost, sbPath+"/turns", map[string]string{"input": "crash, " + canary}, http.StatusAccepted, &turn)
	next(turn.ID, sandbox.TypeSandboxError)
	next(turn.ID, sandbox.TypeTurnCompleted)
	getAll(turn.ID)
	c.do(http.MethodDelete, sbPath, nil, http.StatusOK, nil)
	getAll()

	// A second stream from the start replays the whole log, snapshot first.
	var final sandbox.Sandbox
	c.do(http.MethodGet, sbPath, nil, http.StatusOK, &final)
	replay := make(chan sandbox.Event, 1024)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.follow(ctx, sb.ID, replay)
	}()
	replayed := false
	for ev := range replay {
		if ev.ID == uint64(final.LastEventID) {
			replayed = true
			break
		}
	}
	if !replayed {
		t.Fatalf("the replay ended before event %d", final.LastEventID)
	}
	cancel()
	wg.Wait()

	for _, typ := range []sandbox.Type{
		sandbox.TypeSnapshot, sandbox.TypeSandboxStatus, sandbox.TypeTurnStarted, sandbox.TypeTurnCompleted,
		sandbox.TypeMessageUpdated, sandbox.TypeMessageCompleted, sandbox.TypeToolUpdated,
		sandbox.TypeApprovalRequested, sandbox.TypeApprovalResolved, sandbox.TypeSandboxError,
	} {
		if !c.types[typ] {
			t.Errorf("no %s frame was seen: the test does not cover it", typ)
		}
	}
	redacted := 0
	for _, a := range c.answers {
		if strings.Contains(a, canary) {
			t.Errorf("the secret's value left the server in %.600s", a)
		}
		redacted += strings.Count(a, "[REDACTED]")
	}
	if redacted == 0 {
		t.Fatal("nothing was redacted: the secret never reached an answer, so the test proves nothing")
	}
	t.Logf("%d answers and frames searched, %d redactions", len(c.answers), redacted)
}

// TestServeCORSFlag checks that --cors-origin and SPARKLES_CORS_ORIGINS
// reach the server, and that CORS is off without them.
func TestServeCORSFlag(t *testing.T) {
	preflight := func(p *serveProc, origin string) http.Header {
		req, _ := http.NewRequest(http.MethodOptions, p.url+"/v1/sandboxes", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		ok   []string
		bad  []string
	}{
		{"Off", nil, nil, nil, []string{"https://app.example"}},
		{"Flag", nil, []string{"--cors-origin", "https://app.example", "--cors-origin", "http://localhost:5173"},
			[]string{"https://app.example", "http://localhost:5173"}, []string{"https://evil.example"}},
		{"Env", []string{"SPARKLES_CORS_ORIGINS=https://a.example,https://b.example"}, nil,
			[]string{"https://a.example", "https://b.example"}, []string{"https://app.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, cliEnv(t, tc.env...), t.TempDir(), "cors-token", tc.args...)
			p.waitServing()
			defer p.signal(syscall.SIGTERM)
			for _, o := range tc.ok {
				if got := preflight(p, o).Get("Access-Control-Allow-Origin"); got != o {
					t.Fatalf("origin %s: Allow-Origin %q", o, got)
				}
			}
			for _, o := range tc.bad {
				if got := preflight(p, o).Get("Access-Control-Allow-Origin"); got != "" {
					t.Fatalf("origin %s is not allowed, yet Allow-Origin %q", o, got)
				}
			}
		})
	}
}
