package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// webhookGuard bounds every wait of the webhook tests: a generous guard
// against a hang, never a figure the tests assert.
const webhookGuard = 2 * time.Minute

// hookRequest is one request a receiver got, and its answer (0 when the
// request ended before it was answered).
type hookRequest struct {
	header http.Header
	body   []byte
	status int
}

func (r hookRequest) id() string { return r.header.Get("webhook-id") }
func (r hookRequest) ok() bool   { return r.status >= 200 && r.status < 300 }

// hookReceiver is a webhook receiver on 127.0.0.1. answer chooses the
// status of the n-th request (from 1); it may block, until req's context
// ends, to hold a request open.
type hookReceiver struct {
	t      *testing.T
	url    string
	answer func(req *http.Request, n int) int

	mu      sync.Mutex
	n       int
	reqs    []hookRequest // answered (or abandoned) requests, in the order they ended
	changed chan struct{} // closed and replaced when reqs grows
}

func newHookReceiver(t *testing.T, answer func(req *http.Request, n int) int) *hookReceiver {
	t.Helper()
	rcv := &hookReceiver{t: t, answer: answer, changed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(rcv.serve))
	t.Cleanup(srv.Close)
	rcv.url = srv.URL + "/hook"
	return rcv
}

func (rcv *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	rcv.mu.Lock()
	rcv.n++
	n := rcv.n
	rcv.mu.Unlock()
	status := rcv.answer(req, n)
	rcv.mu.Lock()
	rcv.reqs = append(rcv.reqs, hookRequest{header: req.Header.Clone(), body: body, status: status})
	close(rcv.changed)
	rcv.changed = make(chan struct{})
	rcv.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
	}
}

// requests returns the requests so far.
func (rcv *hookReceiver) requests() []hookRequest {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return slices.Clone(rcv.reqs)
}

// waitFor waits until cond holds of the requests, and returns them.
func (rcv *hookReceiver) waitFor(what string, cond func([]hookRequest) bool, logs ...func() string) []hookRequest {
	rcv.t.Helper()
	guard := time.After(webhookGuard)
	for {
		rcv.mu.Lock()
		reqs, changed := slices.Clone(rcv.reqs), rcv.changed
		rcv.mu.Unlock()
		if cond(reqs) {
			return reqs
		}
		select {
		case <-changed:
		case <-guard:
			var tail strings.Builder
			for _, l := range logs {
				tail.WriteString(l() + "\n")
			}
			rcv.t.Fatalf("the receiver never got %s; it got %s\n%s", what, describeRequests(reqs), tail.String())
		}
	}
}

// delivered returns the webhook-ids of the requests answered 2xx, in order.
func delivered(reqs []hookRequest) []string {
	var ids []string
	for _, r := range reqs {
		if r.ok() {
			ids = append(ids, r.id())
		}
	}
	return ids
}

func describeRequests(reqs []hookRequest) string {
	parts := make([]string, len(reqs))
	for i, r := range reqs {
		parts[i] = fmt.Sprintf("%s=%d", r.id(), r.status)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// expectedDeliveries returns the webhook-ids, in order, of the events of
// sandbox sb's log that endpoint ep receives with the default events
// (docs/webhooks.md: "<endpoint id>_<sandbox id>_<event id>").
func expectedDeliveries(t *testing.T, p *serveProc, ep, sb string) []string {
	t.Helper()
	var ids []string
	for _, ev := range readEventLog(t, p, sb) {
		if slices.Contains(sandbox.DefaultWebhookEvents, ev.Type) {
			ids = append(ids, ep+"_"+sb+"_"+sandbox.FormatID(uint64(ev.ID)))
		}
	}
	return ids
}

// waitDelivered waits until the receiver took every event the endpoint
// receives of sandbox sb, and checks that it took each once, in the log's
// order, and that every request it got was one of them, each first
// attempted in that order. With dups, an event taken again (at least
// once: a receiver deduplicates by webhook-id) counts once. It returns
// the requests.
func waitDelivered(t *testing.T, rcv *hookReceiver, p *serveProc, ep, sb string, dups bool, logs ...func() string) []hookRequest {
	t.Helper()
	took := delivered
	if dups {
		took = func(reqs []hookRequest) []string { return firsts(delivered(reqs)) }
	}
	want := expectedDeliveries(t, p, ep, sb)
	reqs := rcv.waitFor(fmt.Sprintf("the %d events of the log", len(want)), func(reqs []hookRequest) bool {
		return len(took(reqs)) >= len(want)
	}, logs...)
	want = expectedDeliveries(t, p, ep, sb) // the log as it is now
	if got := took(reqs); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want each of the log's events once, in order: %v\nrequests: %s", got, want, describeRequests(reqs))
	}
	var all []string
	for _, r := range reqs {
		if !slices.Contains(want, r.id()) {
			t.Fatalf("a request for %q, which is no event of the log %v", r.id(), want)
		}
		all = append(all, r.id())
	}
	if first := firsts(all); !slices.Equal(first, want) {
		t.Fatalf("events first attempted in the order %v, want %v", first, want)
	}
	return reqs
}

// firsts returns ids without repeats, each where it first appears.
func firsts(ids []string) []string {
	var out []string
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// testServerProc is a sparklestest server seen through the calls of serveProc,
// which need only its URL and token.
func testServerProc(t *testing.T, srv *sparklestest.Server) *serveProc {
	return &serveProc{t: t, url: srv.URL, token: srv.Token, hc: &http.Client{Timeout: 10 * time.Second}, streams: &http.Client{}}
}

// createWebhook registers url with the default events.
func createWebhook(p *serveProc, url string) sandbox.CreatedWebhook {
	p.t.Helper()
	var ep sandbox.CreatedWebhook
	p.mustCall(http.MethodPost, "/v1/webhooks", sandbox.WebhookParams{URL: url, Description: "e2e"}, http.StatusCreated, &ep)
	if !strings.HasPrefix(ep.Secret, "whsec_") || ep.ID == "" {
		p.t.Fatalf("created %+v, want an id and a whsec_ secret", ep)
	}
	return ep
}

// runTurn starts a turn of sandbox sb and returns it.
func runTurn(p *serveProc, sb, input string) sandbox.Turn {
	p.t.Helper()
	var turn sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb+"/turns", map[string]string{"input": input}, http.StatusAccepted, &turn)
	return turn
}

// awaitEvent reads sandbox sb's stream from its start until an event of
// type typ of turn, and returns it.
func awaitEvent(p *serveProc, sb string, typ sandbox.Type, turn string) sandbox.Event {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), webhookGuard)
	defer cancel()
	var since uint64
	resp, err := openStream(ctx, p.streams, p.url, p.token, sb, &since)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := newSSEFrames(resp.Body)
	for {
		f, err := frames.next()
		if err != nil {
			p.t.Fatalf("stream of %s: %v before %s of turn %s\n%s", sb, err, typ, turn, p.logTail())
		}
		if f.id == "" {
			continue
		}
		var ev sandbox.Event
		if err := json.Unmarshal(f.data, &ev); err != nil {
			p.t.Fatal(err)
		}
		if ev.Type == typ && ev.TurnID == turn {
			return ev
		}
	}
}

// standardWebhooksVersion is the npm standardwebhooks package .ci/run
// installs into SPARKLES_TYPESCRIPT_DIR, beside the TypeScript compiler.
const standardWebhooksVersion = "1.1.1"

// standardWebhooksJS returns node and the folder of the pinned npm
// standardwebhooks package. Without them the test is skipped, except in
// CI (the rule of web/typescript_test.go).
func standardWebhooksJS(t *testing.T) (node, pkg string) {
	t.Helper()
	dir := os.Getenv("SPARKLES_TYPESCRIPT_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "sparkles", "typescript")
	}
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+"; skipping the independent verification", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed")
	}
	pkg = filepath.Join(dir, "node_modules", "standardwebhooks")
	var meta struct{ Version string }
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil || meta.Version != standardWebhooksVersion {
		skip("standardwebhooks@%s is not in %s (.ci/run installs it there): %v, version %q", standardWebhooksVersion, dir, err, meta.Version)
	}
	return node, pkg
}

// nodeReceiver is testdata/webhooks/receiver.mjs running: a receiver that
// verifies deliveries with the npm standardwebhooks package.
type nodeReceiver struct {
	t     *testing.T
	url   string
	stdin io.WriteCloser
	lines chan nodeLine
	err   syncbuf.Buffer // its stderr
}

// nodeLine is one line the receiver printed.
type nodeLine struct {
	Listening int             `json:"listening"`
	WebhookID string          `json:"webhook_id"`
	Body      json.RawMessage `json:"body"`
	Rejected  *string         `json:"rejected"`
	Error     string          `json:"error"`
}

func startNodeReceiver(t *testing.T, node, pkg string) *nodeReceiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "webhooks", "receiver.mjs"))
	cmd.Env = append(os.Environ(), "STANDARDWEBHOOKS="+pkg)
	r := &nodeReceiver{t: t, lines: make(chan nodeLine, 100)}
	cmd.Stderr = &r.err
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		defer close(r.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l nodeLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Error = fmt.Sprintf("not a JSON line: %q", sc.Text())
			}
			r.lines <- l
		}
		_ = cmd.Wait()
	}()
	l := r.next()
	if l.Listening == 0 {
		t.Fatalf("receiver.mjs printed %+v first, want the port it listens on", l)
	}
	r.url = fmt.Sprintf("http://127.0.0.1:%d/hook", l.Listening)
	return r
}

// next returns the next line the receiver prints.
func (r *nodeReceiver) next() nodeLine {
	r.t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			r.t.Fatalf("receiver.mjs exited:\n%s", r.err.String())
		}
		return l
	case <-time.After(webhookGuard):
		r.t.Fatalf("receiver.mjs printed nothing more:\n%s", r.err.String())
		return nodeLine{}
	}
}

// setSecret tells the receiver the secret to verify with.
func (r *nodeReceiver) setSecret(secret string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, secret+"\n"); err != nil {
		r.t.Fatal(err)
	}
}
