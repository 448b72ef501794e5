package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

const webhookToken = "webhooks-test-token"

// TestWebhooksE2EVerifiedByNode: deliveries of `sparkles serve` verify
// with the npm standardwebhooks package, an implementation of the scheme
// other than the one that signs them. A turn and a turn that waits for an
// approval reach the Node receiver as turn.completed, approval.requested
// and turn.completed, in order, each with the webhook-id of its event and
// the event as the stream serves it; a request signed with another secret
// is refused there, so the check can fail.
func TestWebhooksE2EVerifiedByNode(t *testing.T) {
	ci, err := os.ReadFile(repoFile(".ci/run"))
	if err != nil {
		t.Fatal(err)
	}
	if pin := "standardwebhooks@" + standardWebhooksVersion; !bytes.Contains(ci, []byte(pin)) {
		t.Fatalf(".ci/run does not install %s, the version this test runs", pin)
	}
	node, pkg := standardWebhooksJS(t)
	rcv := startNodeReceiver(t, node, pkg)
	p := startServe(t, cliEnv(t), t.TempDir(), webhookToken, "--webhook-allow-private")
	p.waitServing()

	ep := createWebhook(p, rcv.url)
	rcv.setSecret(ep.Secret)

	// A request signed with a secret the receiver does not know.
	forger, err := standardwebhooks.NewWebhook(webhook.NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"turn.completed"}`)
	now := time.Now()
	sig, err := forger.Sign("forged", now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, rcv.url, bytes.NewReader(body))
	req.Header.Set("webhook-id", "forged")
	req.Header.Set("webhook-timestamp", sandbox.FormatID(uint64(now.Unix())))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if l := rcv.next(); resp.StatusCode != http.StatusUnauthorized || l.Rejected == nil || *l.Rejected != "forged" {
		t.Fatalf("a forged request: %d, printed %+v; want 401 and rejected", resp.StatusCode, l)
	}

	// verified returns the next delivery the receiver verified.
	type verifiedDelivery struct {
		id string
		ev sandbox.Event
	}
	var got []verifiedDelivery
	verified := func() sandbox.Event {
		t.Helper()
		l := rcv.next()
		if l.Rejected != nil || l.WebhookID == "" {
			t.Fatalf("receiver.mjs did not verify a delivery: %+v\n%s", l, p.logTail())
		}
		var ev sandbox.Event
		if err := json.Unmarshal(l.Body, &ev); err != nil {
			t.Fatalf("delivery %s: %v", l.WebhookID, err)
		}
		got = append(got, verifiedDelivery{l.WebhookID, ev})
		return ev
	}

	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	first := runTurn(p, sb.ID, "hello")
	if ev := verified(); ev.Type != sandbox.TypeTurnCompleted || ev.TurnID != first.ID {
		t.Fatalf("first delivery: %s of turn %s, want turn.completed of %s", ev.Type, ev.TurnID, first.ID)
	}
	second := runTurn(p, sb.ID, "write notes.txt")
	ev := verified()
	asked, ok := ev.Data.(*sandbox.ApprovalRequested)
	if ev.Type != sandbox.TypeApprovalRequested || ev.TurnID != second.ID || !ok {
		t.Fatalf("second delivery: %s of turn %s, want approval.requested of %s", ev.Type, ev.TurnID, second.ID)
	}
	// Decided as the bot the delivery told would.
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/approvals/"+asked.ApprovalID, map[string]string{"decision": "approve"}, http.StatusOK, nil)
	if ev := verified(); ev.Type != sandbox.TypeTurnCompleted || ev.TurnID != second.ID {
		t.Fatalf("third delivery: %s of turn %s, want turn.completed of %s", ev.Type, ev.TurnID, second.ID)
	}

	// Against the log: each webhook-id its event's, each body the event
	// as the log serves it.
	var want []sandbox.Event
	for _, e := range readEventLog(t, p, sb.ID) {
		if slices.Contains(sandbox.DefaultWebhookEvents, e.Type) {
			want = append(want, e)
		}
	}
	if len(want) != len(got) {
		t.Fatalf("the log has %d events of the default types, the receiver verified %d", len(want), len(got))
	}
	for i, e := range want {
		if wantID := ep.ID + "_" + sb.ID + "_" + sandbox.FormatID(e.ID); got[i].id != wantID {
			t.Errorf("delivery %d: webhook-id %q, want %q", i, got[i].id, wantID)
		}
		a, _ := json.Marshal(got[i].ev)
		b, _ := json.Marshal(e)
		if !bytes.Equal(a, b) {
			t.Errorf("delivery %d:\n%s\nwant the log's\n%s", i, a, b)
		}
	}
}

// TestWebhooksE2EFailThenRecover: a receiver that answers 503 while the
// turns run gets, once it recovers, every event once and in order; the
// attempts that failed carried the webhook-id of the event they were
// for, the endpoint says it is failing meanwhile and active after, and
// its delivery log records the failures.
func TestWebhooksE2EFailThenRecover(t *testing.T) {
	const failures = 3
	var recovered atomic.Bool
	rcv := newHookReceiver(t, func(*http.Request, int) int {
		if recovered.Load() {
			return http.StatusNoContent
		}
		return http.StatusServiceUnavailable
	})
	// Retries in milliseconds rather than serve's 5 s, doubling.
	srv := sparklestest.Start(t, sparklestest.WithWebhookBackoff(10*time.Millisecond, 100*time.Millisecond))
	p := testServerProc(t, srv)
	ep := createWebhook(p, rcv.url)

	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	for range 3 {
		turn := runTurn(p, sb.ID, "hello")
		awaitEvent(p, sb.ID, sandbox.TypeTurnCompleted, turn.ID)
	}
	want := expectedDeliveries(t, p, ep.ID, sb.ID)
	// The server records an attempt before it makes the next: once the
	// receiver sees attempt failures+1, the API counts failures at least.
	failed := rcv.waitFor("failed attempts", func(reqs []hookRequest) bool { return len(reqs) > failures })
	for _, r := range failed {
		if r.id() != want[0] {
			t.Fatalf("a failing attempt for %q, want only the first event's, %q: one sandbox's events go in order", r.id(), want[0])
		}
	}
	var wh sandbox.Webhook
	p.mustCall(http.MethodGet, "/v1/webhooks/"+ep.ID, nil, http.StatusOK, &wh)
	if wh.State != sandbox.WebhookFailing || wh.Stats.Failed < failures || wh.Stats.Delivered != 0 {
		t.Fatalf("while the receiver fails: state %q, stats %+v; want failing, %d failed at least", wh.State, wh.Stats, failures)
	}
	var log struct {
		Data []sandbox.WebhookDelivery `json:"data"`
	}
	p.mustCall(http.MethodGet, "/v1/webhooks/"+ep.ID+"/deliveries", nil, http.StatusOK, &log)
	if len(log.Data) < failures {
		t.Fatalf("the delivery log has %d attempts, want %d at least", len(log.Data), failures)
	}
	if d := log.Data[0]; d.ID != want[0] || d.StatusCode != http.StatusServiceUnavailable || d.Error == "" || d.Attempt < failures {
		t.Fatalf("the newest attempt %+v, want a failed attempt %d or later of %s, 503", d, failures, want[0])
	}

	recovered.Store(true)
	reqs := waitDelivered(t, rcv, p, ep.ID, sb.ID, false)
	if n := len(reqs) - len(delivered(reqs)); n < failures {
		t.Fatalf("%d failed attempts, want %d at least", n, failures)
	}
	// The server counts a delivery once the receiver's answer is read.
	pollWebhook(p, ep.ID, "active with every event delivered", func(wh sandbox.Webhook) bool {
		return wh.State == sandbox.WebhookActive && wh.Stats.Delivered == uint64(len(want))
	})
}

// pollWebhook polls endpoint id until cond holds of it.
func pollWebhook(p *serveProc, id, what string, cond func(sandbox.Webhook) bool) {
	p.t.Helper()
	deadline := time.Now().Add(webhookGuard)
	for {
		var wh sandbox.Webhook
		p.mustCall(http.MethodGet, "/v1/webhooks/"+id, nil, http.StatusOK, &wh)
		if cond(wh) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("endpoint %s never %s: %+v", id, what, wh)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebhooksE2EKilledMidDelivery: the server is killed (SIGKILL) while
// the receiver holds a delivery open, with a later event waiting behind
// it. Started again on the same data dir it delivers both, in order,
// the first with the webhook-id of the attempt that was cut short.
func TestWebhooksE2EKilledMidDelivery(t *testing.T) {
	held := make(chan struct{})
	rcv := newHookReceiver(t, func(req *http.Request, n int) int {
		if n > 1 {
			return http.StatusNoContent
		}
		close(held)
		<-req.Context().Done() // until the server is gone
		return 0
	})
	dir := t.TempDir()
	p := startServe(t, cliEnv(t), dir, webhookToken, "--webhook-allow-private")
	p.waitServing()
	ep := createWebhook(p, rcv.url)
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	for range 2 {
		turn := runTurn(p, sb.ID, "hello")
		awaitEvent(p, sb.ID, sandbox.TypeTurnCompleted, turn.ID)
	}
	select {
	case <-held:
	case <-time.After(webhookGuard):
		t.Fatalf("no delivery reached the receiver:\n%s", p.logTail())
	}
	want := expectedDeliveries(t, p, ep.ID, sb.ID)
	if len(want) != 2 {
		t.Fatalf("the log has %v to deliver, want two turn.completed", want)
	}
	p.kill()
	cut := rcv.waitFor("the end of the held request", func(reqs []hookRequest) bool { return len(reqs) >= 1 })[0]
	if cut.id() != want[0] || cut.ok() {
		t.Fatalf("the held request: %s answered %d, want %s unanswered", cut.id(), cut.status, want[0])
	}

	p = startServe(t, cliEnv(t), dir, webhookToken, "--webhook-allow-private")
	p.waitServing()
	reqs := waitDelivered(t, rcv, p, ep.ID, sb.ID, false, p.logTail)
	if got := delivered(reqs); got[0] != cut.id() {
		t.Fatalf("redelivered %s first, want the interrupted %s", got[0], cut.id())
	}
}

// TestWebhooksE2EPrivateRefused: without --webhook-allow-private an
// endpoint whose name resolves to 127.0.0.1, or that is a loopback
// address, is refused at registration with invalid_request naming the
// flag, and nothing is registered.
func TestWebhooksE2EPrivateRefused(t *testing.T) {
	rcv := newHookReceiver(t, func(*http.Request, int) int { return http.StatusNoContent })
	u, err := url.Parse(rcv.url)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	p := startServe(t, cliEnv(t), t.TempDir(), webhookToken)
	p.waitServing()
	for _, endpoint := range []string{"http://localhost:" + port + "/", rcv.url} {
		e := p.fails(http.MethodPost, "/v1/webhooks", sandbox.WebhookParams{URL: endpoint})
		if e.status != http.StatusBadRequest || e.Error.Type != "invalid_request" || !strings.Contains(e.Error.Message, "--webhook-allow-private") {
			t.Fatalf("POST /v1/webhooks %s: %d %+v; want 400 invalid_request naming --webhook-allow-private", endpoint, e.status, e.Error)
		}
	}
	var list struct {
		Data []sandbox.Webhook `json:"data"`
	}
	p.mustCall(http.MethodGet, "/v1/webhooks", nil, http.StatusOK, &list)
	if len(list.Data) != 0 {
		t.Fatalf("registered %+v after refusals", list.Data)
	}
	if got := rcv.requests(); len(got) != 0 {
		t.Fatalf("the receiver got %s", describeRequests(got))
	}
}

// TestWebhooksE2ERotateSecret: after rotate-secret the next delivery
// verifies with the new secret and not with the old one, and so does a
// retry of an event delivered before; GET never answers the secret.
func TestWebhooksE2ERotateSecret(t *testing.T) {
	rcv := newHookReceiver(t, func(*http.Request, int) int { return http.StatusNoContent })
	p := startServe(t, cliEnv(t), t.TempDir(), webhookToken, "--webhook-allow-private")
	p.waitServing()
	ep := createWebhook(p, rcv.url)
	oldKey, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		t.Fatal(err)
	}
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	runTurn(p, sb.ID, "hello")
	reqs := rcv.waitFor("a delivery", func(reqs []hookRequest) bool { return len(reqs) == 1 })
	if err := oldKey.Verify(reqs[0].body, reqs[0].header); err != nil {
		t.Fatalf("the first delivery does not verify with the secret: %v", err)
	}

	var rotated sandbox.CreatedWebhook
	p.mustCall(http.MethodPost, "/v1/webhooks/"+ep.ID+"/rotate-secret", nil, http.StatusOK, &rotated)
	if !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == ep.Secret || rotated.ID != ep.ID {
		t.Fatalf("rotated: %+v", rotated)
	}
	newKey, err := standardwebhooks.NewWebhook(rotated.Secret)
	if err != nil {
		t.Fatal(err)
	}
	var raw json.RawMessage
	p.mustCall(http.MethodGet, "/v1/webhooks/"+ep.ID, nil, http.StatusOK, &raw)
	if bytes.Contains(raw, []byte("whsec_")) || bytes.Contains(raw, []byte(`"secret"`)) {
		t.Fatalf("GET answers a secret: %s", raw)
	}
	check := func(r hookRequest, what string) {
		t.Helper()
		if err := newKey.Verify(r.body, r.header); err != nil {
			t.Fatalf("%s does not verify with the new secret: %v", what, err)
		}
		if err := oldKey.Verify(r.body, r.header); err == nil {
			t.Fatalf("%s still verifies with the old secret", what)
		}
	}

	runTurn(p, sb.ID, "hello")
	reqs = rcv.waitFor("a second delivery", func(reqs []hookRequest) bool { return len(reqs) == 2 })
	check(reqs[1], "the delivery after the rotation")

	var d sandbox.WebhookDelivery
	p.mustCall(http.MethodPost, "/v1/webhooks/"+ep.ID+"/deliveries/"+reqs[0].id()+"/retry", nil, http.StatusOK, &d)
	if d.ID != reqs[0].id() || d.StatusCode != http.StatusNoContent {
		t.Fatalf("retry of %s: %+v", reqs[0].id(), d)
	}
	reqs = rcv.waitFor("the retried delivery", func(reqs []hookRequest) bool { return len(reqs) == 3 })
	if reqs[2].id() != reqs[0].id() || !bytes.Equal(reqs[2].body, reqs[0].body) {
		t.Fatalf("the retry sent %s %s, want %s again", reqs[2].id(), reqs[2].body, reqs[0].id())
	}
	check(reqs[2], "the retry of a delivery made before the rotation")
}

// TestWebhooksE2ENATSTakeover: on one NATS store, node A holds a sandbox
// and delivers its first event; the receiver fails the next. A is killed
// (SIGKILL) and the receiver recovers. Node B takes the sandbox over and
// delivers from the durable cursors: every event arrives, in order, each
// delivery with its event's webhook-id.
func TestWebhooksE2ENATSTakeover(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	start := func(node string) *serveProc {
		p := startServe(t, cliEnv(t), t.TempDir(), webhookToken, "--store", natsURL, "--node-id", node,
			"--lease-ttl", "1s", "--webhook-allow-private")
		p.waitServing()
		return p
	}
	a, b := start("node-a"), start("node-b")
	var recovered atomic.Bool
	rcv := newHookReceiver(t, func(_ *http.Request, n int) int {
		if n == 1 || recovered.Load() {
			return http.StatusNoContent
		}
		return http.StatusServiceUnavailable
	})
	ep := createWebhook(a, rcv.url)
	var sb sandbox.Sandbox
	a.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	for range 2 {
		turn := runTurn(a, sb.ID, "hello")
		awaitEvent(a, sb.ID, sandbox.TypeTurnCompleted, turn.ID)
	}
	want := expectedDeliveries(t, a, ep.ID, sb.ID)
	reqs := rcv.waitFor("a failed attempt", func(reqs []hookRequest) bool { return len(reqs) >= 2 }, a.logTail)
	if reqs[0].id() != want[0] || reqs[1].id() != want[1] || reqs[1].ok() {
		t.Fatalf("A's attempts: %s, want %s taken and %s failed", describeRequests(reqs), want[0], want[1])
	}
	a.kill()
	recovered.Store(true)
	// At least once: B resumes from the cursor A saved. A saves it after
	// each page of the log and before it waits to retry, so a kill right
	// after the failed attempt may come before that save, and B then
	// sends A's delivered event again, with the same webhook-id.
	waitDelivered(t, rcv, b, ep.ID, sb.ID, true, b.logTail)
}
