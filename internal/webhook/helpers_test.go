package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// delivery is one request a receiver took, its signature verified.
type delivery struct {
	WebhookID string
	Timestamp string // the webhook-timestamp header
	Signature string // the webhook-signature header
	Status    int    // what the receiver answered
	Body      struct {
		Type      sandbox.Type    `json:"type"`
		ID        string          `json:"id"`
		SandboxID string          `json:"sandbox_id"`
		TurnID    *string         `json:"turn_id"`
		TS        string          `json:"ts"`
		Data      json.RawMessage `json:"data"`
	}
	Raw []byte
}

func (d delivery) eventID(tb testing.TB) uint64 {
	id, err := strconv.ParseUint(d.Body.ID, 10, 64)
	if err != nil {
		tb.Fatalf("delivery id %q: %v", d.Body.ID, err)
	}
	return id
}

// receiver is a loopback endpoint that verifies every request with the
// Standard Webhooks library and answers what status says.
type receiver struct {
	tb     testing.TB
	srv    *httptest.Server
	secret string
	// status answers the n-th request (from 1); nil answers 204.
	status func(n int) int
	// hold, when set, is waited on before answering.
	hold chan struct{}
	// anyTime verifies signatures of any timestamp (a loop on a fake clock).
	anyTime bool

	mu   sync.Mutex
	reqs []delivery
	seen chan delivery // every request, once answered
}

func newReceiver(tb testing.TB, secret string) *receiver {
	r := &receiver{tb: tb, secret: secret, seen: make(chan delivery, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.tb.Errorf("receiver: read body: %v", err)
		return
	}
	r.mu.Lock()
	secret := r.secret
	r.mu.Unlock()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		r.tb.Errorf("receiver: secret: %v", err)
		return
	}
	verify := wh.Verify
	if r.anyTime {
		verify = wh.VerifyIgnoringTimestamp
	}
	if err := verify(body, req.Header); err != nil {
		r.tb.Errorf("receiver: verify: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	d := delivery{WebhookID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
		Signature: req.Header.Get("webhook-signature"), Raw: body}
	if err := json.Unmarshal(body, &d.Body); err != nil {
		r.tb.Errorf("receiver: decode %s: %v", body, err)
	}
	if r.hold != nil {
		<-r.hold
	}
	r.mu.Lock()
	n := len(r.reqs) + 1
	d.Status = http.StatusNoContent
	if r.status != nil {
		d.Status = r.status(n)
	}
	r.reqs = append(r.reqs, d)
	r.mu.Unlock()
	w.WriteHeader(d.Status)
	r.seen <- d
}

// accepted returns the requests answered 2xx, in order.
func (r *receiver) accepted() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ok []delivery
	for _, d := range r.reqs {
		if d.Status/100 == 2 {
			ok = append(ok, d)
		}
	}
	return ok
}

// waitAccepted waits until the receiver has answered 2xx to n requests.
func (r *receiver) waitAccepted(tb testing.TB, n int) []delivery {
	tb.Helper()
	guard := time.NewTimer(30 * time.Second) // against a hang, not a measure
	defer guard.Stop()
	for {
		if ok := r.accepted(); len(ok) >= n {
			return ok
		}
		select {
		case <-r.seen:
		case <-guard.C:
			tb.Fatalf("receiver: %d of %d deliveries accepted", len(r.accepted()), n)
		}
	}
}

func newSandbox(tb testing.TB, st *boltstore.Store) string {
	tb.Helper()
	id := sandbox.NewID("sbx_")
	now := time.Now().UTC()
	sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: now, UpdatedAt: now}
	if err := st.Create(context.Background(), sb, nil); err != nil {
		tb.Fatal(err)
	}
	return id
}

// appendEvents appends events of the given types, of one turn, and
// returns their ids.
func appendEvents(tb testing.TB, st *boltstore.Store, id string, types ...sandbox.Type) []uint64 {
	tb.Helper()
	evs := make([]*sandbox.Event, len(types))
	for i, typ := range types {
		var data any
		switch typ {
		case sandbox.TypeTurnStarted:
			data = sandbox.TurnStarted{Input: []sandbox.Input{}}
		case sandbox.TypeTurnCompleted:
			data = sandbox.TurnCompleted{Status: "completed", StopReason: "end_turn"}
		case sandbox.TypeApprovalRequested:
			data = sandbox.ApprovalRequested{ApprovalID: sandbox.NewID("apr_"), ToolCallID: "call_1", Title: "run"}
		case sandbox.TypeMessageUpdated:
			data = sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: "text", Text: "hi"}
		case sandbox.TypeSandboxError:
			data = sandbox.SandboxError{Code: "agent_failed", Message: "exited"}
		}
		evs[i] = &sandbox.Event{Type: typ, TurnID: "turn_1", Data: data}
	}
	if err := st.Append(context.Background(), id, evs, nil); err != nil {
		tb.Fatal(err)
	}
	ids := make([]uint64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

func repeat(t sandbox.Type, n int) []sandbox.Type {
	ts := make([]sandbox.Type, n)
	for i := range ts {
		ts[i] = t
	}
	return ts
}

// newEndpoint registers an enabled endpoint for url.
func newEndpoint(tb testing.TB, st webhook.Store, url string, events ...sandbox.Type) webhook.Endpoint {
	tb.Helper()
	ep := webhook.Endpoint{ID: sandbox.NewID("wh_"), URL: url, Events: events, Secret: webhook.NewSecret(),
		Enabled: true, CreatedAt: time.Now()}
	if err := webhook.Put(context.Background(), st, ep); err != nil {
		tb.Fatal(err)
	}
	return ep
}

// startLoop runs a loop over st that may reach loopback, with short
// backoffs so retries come soon.
func startLoop(tb testing.TB, st *boltstore.Store, cfg webhook.Config) *webhook.Loop {
	tb.Helper()
	cfg.Store, cfg.Log, cfg.AllowPrivate = st, st, true
	if cfg.Client == nil {
		cfg.Client = webhook.NewClient(webhook.ClientOptions{AllowPrivate: true})
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 20*time.Millisecond
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	l := webhook.New(cfg)
	l.Start()
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

func openStore(tb testing.TB) *boltstore.Store { return bolttest.MustOpen(tb) }
