package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// outageAnswer is one answer the load got during TestServeNATSFullOutage.
type outageAnswer struct {
	kind   string // create, turn, events, sandbox, readyz
	path   string
	status int
	typ    string // the error's type, if any
	retry  string // Retry-After
	took   time.Duration
	during bool // sent while NATS was cut off
	err    error
}

// outageLoad sends requests to p and keeps every answer.
type outageLoad struct {
	p      *serveProc
	hc     *http.Client
	cut    atomic.Bool
	mu     sync.Mutex
	all    []outageAnswer
	turns  [][2]string // accepted turns: sandbox id, turn id
	bodies map[string][]byte
}

func (l *outageLoad) send(kind, method, path string, body any, out any) outageAnswer {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, l.p.url+path, r)
	if kind != "readyz" {
		req.Header.Set("Authorization", "Bearer "+l.p.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	a := outageAnswer{kind: kind, path: path, during: l.cut.Load()}
	start := time.Now()
	resp, err := l.hc.Do(req)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		a.status, a.retry = resp.StatusCode, resp.Header.Get("Retry-After")
		if resp.StatusCode >= 400 && kind != "readyz" {
			var e apiError
			_ = json.Unmarshal(b, &e)
			a.typ = e.Error.Type
			if a.status == http.StatusInternalServerError {
				l.mu.Lock()
				l.bodies[path] = b
				l.mu.Unlock()
			}
		} else if out != nil && resp.StatusCode < 300 {
			_ = json.Unmarshal(b, out)
		}
	}
	a.took, a.err = time.Since(start), err
	l.mu.Lock()
	l.all = append(l.all, a)
	l.mu.Unlock()
	return a
}

// count counts the answers that match.
func (l *outageLoad) count(match func(outageAnswer) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.all {
		if match(a) {
			n++
		}
	}
	return n
}

// run sends requests of one kind, paced, until stop.
func (l *outageLoad) run(stop <-chan struct{}, step func()) {
	tick := time.NewTicker(20 * time.Millisecond) // paces the load; waits for nothing
	defer tick.Stop()
	for {
		step()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// waitUntil polls cond until it holds, and fails the test with what after
// a deadline.
func waitUntil(t *testing.T, p *serveProc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s\n%s", what, p.logTail())
		}
		time.Sleep(20 * time.Millisecond) // polls a condition, with a deadline
	}
}

// TestServeNATSFullOutage: `sparkles serve` under load (two clients
// creating sandboxes and starting turns, one reading a sandbox's events,
// one asking /readyz) while NATS is cut off for longer than the lease
// TTL, so this node's leases lapse. Every answer comes back (the client
// waits 5 s, and no request times out), and every one is a success or 503
// unavailable with Retry-After, never 500; /readyz is 503 during the
// outage and 200 after; reads answer 200 or 503. Afterwards every
// accepted turn has started and ended once in its log. The latencies
// during the outage are logged (go test -v).
func TestServeNATSFullOutage(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	px := newCutProxy(t, strings.TrimPrefix(natsURL, "nats://"))
	const token = "nats-full-outage-token"
	p := startServe(t, cliEnv(t), t.TempDir(), token, "--store", "nats://"+px.l.Addr().String(),
		"--node-id", "full-outage", "--lease-ttl", "3s", "--flush-interval", "5ms")
	p.waitServing()
	t.Cleanup(func() {
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("serve exited with %d:\n%s", code, p.logTail())
		}
	})
	var held sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &held)
	var first sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+held.ID+"/turns", map[string]any{"input": "hello"}, http.StatusAccepted, &first)

	l := &outageLoad{p: p, hc: &http.Client{Timeout: 5 * time.Second}, bodies: map[string][]byte{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			l.run(stop, func() {
				var sb sandbox.Sandbox
				if a := l.send("create", http.MethodPost, "/v1/sandboxes", map[string]any{}, &sb); a.status != http.StatusCreated {
					return
				}
				var turn sandbox.Turn
				if a := l.send("turn", http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]any{"input": "hello"}, &turn); a.status == http.StatusAccepted {
					l.mu.Lock()
					l.turns = append(l.turns, [2]string{sb.ID, turn.ID})
					l.mu.Unlock()
				}
			})
		})
	}
	wg.Go(func() {
		l.run(stop, func() {
			l.send("events", http.MethodGet, "/v1/sandboxes/"+held.ID+"/events?limit=100", nil, nil)
			l.send("sandbox", http.MethodGet, "/v1/sandboxes/"+held.ID, nil, nil)
		})
	})
	wg.Go(func() { l.run(stop, func() { l.send("readyz", http.MethodGet, "/readyz", nil, nil) }) })
	accepted := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.turns)
	}
	waitUntil(t, p, "no turn accepted under load before the outage", func() bool { return accepted() >= 2 })

	l.cut.Store(true)
	px.setCut(true)
	p.waitLog("this node's leases lapsed")
	waitUntil(t, p, "too few answers during the outage", func() bool {
		return l.count(func(a outageAnswer) bool { return a.during && a.kind == "create" }) >= 10 &&
			l.count(func(a outageAnswer) bool { return a.during && a.kind == "events" }) >= 10
	})
	px.setCut(false)
	l.cut.Store(false)
	before := accepted()
	waitUntil(t, p, "no turn accepted after the outage", func() bool { return accepted() > before })
	waitReadyz(t, p, http.StatusOK, "")
	close(stop)
	wg.Wait()

	// Every answer came, and none was a 500.
	took := map[string][]time.Duration{}
	unavailable := map[string]int{}
	for _, a := range l.all {
		ok := a.status >= 200 && a.status < 300 ||
			a.status == http.StatusServiceUnavailable && (a.kind == "readyz" || a.typ == sandbox.EUnavailable && a.retry != "")
		if a.err != nil || !ok {
			t.Errorf("%s %s: %d %s (Retry-After %q) after %s, %v; want a success or 503 unavailable with Retry-After\n%s",
				a.kind, a.path, a.status, a.typ, a.retry, a.took, a.err, l.bodies[a.path])
		}
		if a.during {
			took[a.kind] = append(took[a.kind], a.took)
			if a.status == http.StatusServiceUnavailable {
				unavailable[a.kind]++
			}
		}
	}
	for _, kind := range []string{"create", "readyz"} {
		if unavailable[kind] == 0 {
			t.Errorf("no %s answered 503 during the outage", kind)
		}
	}
	for _, kind := range []string{"create", "turn", "events", "sandbox", "readyz"} {
		d := took[kind]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		t.Logf("during the outage: %-7s %3d answers (%3d 503), median %s, max %s", kind, len(d), unavailable[kind], d[len(d)/2], d[len(d)-1])
	}

	// Nothing accepted is lost: every accepted turn starts and ends once.
	l.mu.Lock()
	turns := append([][2]string{{held.ID, first.ID}}, l.turns...)
	l.mu.Unlock()
	bySandbox := map[string][]string{}
	for _, st := range turns {
		id, turn := st[0], st[1]
		bySandbox[id] = append(bySandbox[id], turn)
		waitUntil(t, p, "turn "+turn+" of "+id+" never ended", func() bool {
			var got sandbox.Turn
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			status, err := p.call(ctx, http.MethodGet, "/v1/sandboxes/"+id+"/turns/"+turn, nil, &got)
			return err == nil && status == http.StatusOK && got.Status != sandbox.TurnQueued && got.Status != sandbox.TurnRunning
		})
	}
	for id, want := range bySandbox {
		log := readEventLog(t, p, id)
		checkInvariants(t, log)
		wantAccepted(t, log, want)
	}
}
