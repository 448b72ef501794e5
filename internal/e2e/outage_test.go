package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/faultstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// readyzAnswer is one answer of /readyz.
type readyzAnswer struct {
	code   int
	Status string `json:"status"`
	Reason string `json:"reason"`
}

func getReadyz(base string) (readyzAnswer, error) {
	var a readyzAnswer
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return a, fmt.Errorf("GET /readyz: %v in %s", err, body)
	}
	a.code = resp.StatusCode
	return a, nil
}

// waitReadyz asks /readyz until it answers status with a reason that
// contains reason, and fails the test with the last answer after a
// deadline.
func waitReadyz(t *testing.T, p *serveProc, status int, reason string) readyzAnswer {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		a, err := getReadyz(p.url)
		if err != nil {
			t.Fatal(err)
		}
		if a.code == status && strings.Contains(a.Reason, reason) {
			return a
		}
		select {
		case <-deadline.C:
			t.Fatalf("GET /readyz = %d %q, want %d with a reason with %q\n%s", a.code, a.Reason, status, reason, p.logTail())
		case <-tick.C:
		}
	}
}

// apiError is an error answer of the API, with its status and headers.
type apiError struct {
	status int
	header http.Header
	Error  struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// send sends a JSON request and returns the answer whole.
func (p *serveProc) send(method, path string, body any) (int, http.Header, []byte) {
	p.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, p.url+path, r)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", method, path, err, p.logTail())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// errorAnswer decodes an error answer.
func (p *serveProc) errorAnswer(status int, h http.Header, b []byte) apiError {
	p.t.Helper()
	var a apiError
	if err := json.Unmarshal(b, &a); err != nil || a.Error.Type == "" {
		p.t.Fatalf("an answer %d %s, want an error", status, b)
	}
	a.status, a.header = status, h
	return a
}

// fails sends a request that must fail, and returns the error answer.
func (p *serveProc) fails(method, path string, body any) apiError {
	p.t.Helper()
	return p.errorAnswer(p.send(method, path, body))
}

// wantUnavailable checks that each request that writes is answered 503
// unavailable, with a message that says why and a Retry-After; all but a
// delete, which is done at once and recorded later (TestDiskLimits).
func wantUnavailable(t *testing.T, p *serveProc, sb, turn, reason string) {
	t.Helper()
	for _, rq := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/v1/sandboxes", map[string]any{}},
		{http.MethodPost, "/v1/sandboxes/" + sb + "/turns", map[string]any{"input": "hello"}},
		{http.MethodPost, "/v1/sandboxes/" + sb + "/turns/" + turn + "/cancel", nil},
		{http.MethodPost, "/v1/sandboxes/" + sb + "/approvals/appr_none", map[string]any{"decision": "approve"}},
	} {
		a := p.fails(rq.method, rq.path, rq.body)
		if a.status != http.StatusServiceUnavailable || a.Error.Type != sandbox.EUnavailable ||
			!strings.Contains(a.Error.Message, reason) || a.header.Get("Retry-After") == "" {
			t.Fatalf("%s %s during the outage = %d %+v (Retry-After %q); want 503 unavailable saying %q",
				rq.method, rq.path, a.status, a.Error, a.header.Get("Retry-After"), reason)
		}
	}
}

// waitText waits until the turn has streamed assistant text, not only
// reasoning: a turn stopped from then on ends with a message.completed
// that has text.
func (r *recorder) waitText(turn string) {
	r.t.Helper()
	deadline := time.After(scenarioWait)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		for _, f := range r.of(turn, sandbox.TypeMessageUpdated) {
			var d sandbox.MessageUpdated
			mustDecode(r.t, f, &d)
			if d.Kind == sandbox.PartText {
				return
			}
		}
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("no assistant text in turn %s within %s; received: %s", turn, scenarioWait, r.summary())
		}
	}
}

// inProcess is a serveProc for a Main run in the test's own process: the
// helpers that call the API, read the log and follow streams work on it.
func inProcess(t *testing.T, m *app.Main) *serveProc {
	return &serveProc{
		t: t, url: "http://" + m.Listener.Addr().String(), token: m.Token,
		hc: &http.Client{Timeout: 10 * time.Second}, streams: &http.Client{},
	}
}

// TestServeStoreOutage runs the server as serve wires it, on a store that
// refuses writes on command, while a turn streams to a client. During the
// outage every request that writes is answered 503 unavailable with the
// reason and changes nothing, reads keep answering, /readyz is 503 with
// the reason and the metrics say the store is down. After the heal
// everything resumes without a restart: /readyz is 200, the turn has its
// one turn.completed (failed, internal), new turns run, the metrics moved,
// and what the client streamed is the log, byte for byte.
func TestServeStoreOutage(t *testing.T) {
	dir := t.TempDir()
	bs := bolttest.MustOpenAt(t, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	fs := faultstore.New(bs)
	m := &app.Main{
		Addr: "127.0.0.1:0", DataDir: dir, Token: "outage-token",
		Agents:        registry.Registry{"demo": {Command: binary, Args: []string{"agent", "demo"}}},
		DefaultAgent:  "demo",
		FlushInterval: 5 * time.Millisecond,
		Logger:        slog.New(slog.DiscardHandler),
		Store:         fs,
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	p := inProcess(t, m)
	waitReadyz(t, p, http.StatusOK, "")

	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	rec := newRecorder(t, sb.ID, m.Token)
	rec.follow(p)
	var turn sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]any{"input": "slow"}, http.StatusAccepted, &turn)
	rec.waitText(turn.ID)

	fs.Fail(faultstore.ErrDiskFull)
	waitReadyz(t, p, http.StatusServiceUnavailable, "disk full")
	wantUnavailable(t, p, sb.ID, turn.ID, "disk full")
	var got sandbox.Turn
	p.mustCall(http.MethodGet, "/v1/sandboxes/"+sb.ID+"/turns/"+turn.ID, nil, http.StatusOK, &got)
	if got.Status != sandbox.TurnRunning {
		t.Fatalf("GET turn during the outage: %s, want running as the log has it", got.Status)
	}
	readEventLog(t, p, sb.ID)
	waitSeries(t, p, func(s series) string {
		if s.get("sparkles_store_healthy") != 0 || s.get("sparkles_store_append_failures_total") < 1 {
			return "sparkles_store_healthy is not 0 or no failed append is counted"
		}
		return ""
	})

	fs.Heal()
	waitReadyz(t, p, http.StatusOK, "")
	done := rec.wait(turn.ID, sandbox.TypeTurnCompleted)
	var d sandbox.TurnCompleted
	mustDecode(t, done, &d)
	if d.Status != sandbox.TurnFailed || d.Error == nil || d.Error.Code != sandbox.ErrInternal {
		t.Fatalf("the turn of the outage ended %s, want failed with internal", done.data)
	}
	var next sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]any{"input": "hello"}, http.StatusAccepted, &next)
	rec.wait(next.ID, sandbox.TypeTurnCompleted)
	waitSeries(t, p, func(s series) string {
		switch {
		case s.get("sparkles_store_healthy") != 1:
			return "sparkles_store_healthy is not back to 1"
		case s.get("sparkles_store_append_retries_total") < 1:
			return "no retry is counted"
		case s.get("sparkles_events_waiting") != 0:
			return "events still wait"
		case s.get(`sparkles_turns_total{status="failed"}`) != 1, s.get(`sparkles_turns_total{status="succeeded"}`) != 1:
			return "the two turns are not counted"
		}
		return ""
	})

	// Nothing a 503 answered was done: one sandbox, two turns.
	var list struct{ Data []sandbox.Sandbox }
	p.mustCall(http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, &list)
	if len(list.Data) != 1 || list.Data[0].Status == sandbox.StatusDeleted {
		t.Fatalf("after the outage the server has %+v, want the one sandbox, not deleted", list.Data)
	}
	log := readEventLog(t, p, sb.ID)
	starts := 0
	for _, ev := range log {
		if ev.Type == sandbox.TypeTurnStarted {
			starts++
		}
	}
	if starts != 2 {
		t.Fatalf("%d turns in the log, want the 2 accepted", starts)
	}
	checkInvariants(t, log)
	rec.wantSameAs(log)
}

// wantAccepted checks that every accepted turn started and completed in
// the log, once each.
func wantAccepted(t *testing.T, log []sandbox.Event, accepted []string) {
	t.Helper()
	started, completed := map[string]int{}, map[string]int{}
	for _, ev := range log {
		switch ev.Type {
		case sandbox.TypeTurnStarted:
			started[ev.TurnID]++
		case sandbox.TypeTurnCompleted:
			completed[ev.TurnID]++
		}
	}
	for _, turn := range accepted {
		if started[turn] != 1 || completed[turn] != 1 {
			t.Errorf("accepted turn %s: %d turn.started and %d turn.completed in the log, want 1 and 1", turn, started[turn], completed[turn])
		}
	}
}

// cutProxy forwards TCP connections on the loopback interface to target,
// and cuts them all on command: a store on the network that goes away
// and comes back, with nothing of the store itself touched.
type cutProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	var wg sync.WaitGroup
	wg.Go(p.serve)
	t.Cleanup(func() {
		l.Close()
		p.setCut(true)
		wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		var up net.Conn
		if !p.cut {
			up, err = net.Dial("tcp", p.target)
		}
		if p.cut || err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

// setCut cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestServeNATSOutage: `sparkles serve` on a NATS store that becomes
// unreachable while a turn streams, then reachable again. The same
// contract as on a full disk: 503 unavailable and /readyz 503 while it is
// gone, and afterwards the turn's one turn.completed, new turns, and what
// the client streamed is the log.
func TestServeNATSOutage(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	px := newCutProxy(t, strings.TrimPrefix(natsURL, "nats://"))
	const token = "nats-outage-token"
	// The leases outlive the outage: this is the store going away, not the
	// node (that is TestServeNATS).
	p := startServe(t, cliEnv(t), t.TempDir(), token, "--store", "nats://"+px.l.Addr().String(),
		"--node-id", "outage", "--lease-ttl", "1m", "--flush-interval", "5ms")
	p.waitServing()
	t.Cleanup(func() {
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("serve exited with %d:\n%s", code, p.logTail())
		}
	})
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	rec := newRecorder(t, sb.ID, token)
	rec.follow(p)
	var turn sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]any{"input": "slow"}, http.StatusAccepted, &turn)
	rec.waitText(turn.ID)

	px.setCut(true)
	const cannot = "the event store cannot take writes"
	waitReadyz(t, p, http.StatusServiceUnavailable, cannot)
	wantUnavailable(t, p, sb.ID, turn.ID, cannot)

	px.setCut(false)
	waitReadyz(t, p, http.StatusOK, "")
	// The stream broke with the connection to the store's server only if
	// the server closed it; follow again from the last id either way.
	rec.follow(p)
	// The turn ends once: failed, if one of its writes was refused during
	// the outage (the requests above are answered at once, so the agent
	// may have had nothing to write meanwhile), else as it would have.
	var d sandbox.TurnCompleted
	mustDecode(t, rec.wait(turn.ID, sandbox.TypeTurnCompleted), &d)
	if d.Status == sandbox.TurnFailed && (d.Error == nil || d.Error.Code != sandbox.ErrInternal) {
		t.Fatalf("the turn of the outage ended %+v, want succeeded, or failed with internal", d)
	}
	var next sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]any{"input": "hello"}, http.StatusAccepted, &next)
	rec.wait(next.ID, sandbox.TypeTurnCompleted)
	log := readEventLog(t, p, sb.ID)
	checkInvariants(t, log)
	wantAccepted(t, log, []string{turn.ID, next.ID})
	rec.wantSameAs(log)
}
