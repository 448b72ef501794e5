package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The events an endpoint chose arrive in log order, each once, signed,
// with the stored event's fields; the others, and those from before the
// endpoint was created, are passed over.
func TestLoop_Order(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	early := &sandbox.Event{Type: sandbox.TypeTurnCompleted, TurnID: "turn_0", TS: time.Now().Add(-time.Minute),
		Data: sandbox.TurnCompleted{Status: "completed", StopReason: "end_turn"}}
	if err := st.Append(context.Background(), sb, []*sandbox.Event{early}, nil); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, "")
	ep := newEndpoint(t, st, rcv.srv.URL, sandbox.TypeTurnCompleted, sandbox.TypeApprovalRequested)
	rcv.secret = ep.Secret

	types := []sandbox.Type{sandbox.TypeTurnStarted, sandbox.TypeMessageUpdated, sandbox.TypeTurnCompleted,
		sandbox.TypeApprovalRequested, sandbox.TypeMessageUpdated, sandbox.TypeSandboxError, sandbox.TypeTurnCompleted}
	ids := appendEvents(t, st, sb, types...)
	startLoop(t, st, webhook.Config{})
	more := appendEvents(t, st, sb, sandbox.TypeMessageUpdated, sandbox.TypeTurnCompleted)

	var want []uint64
	for i, typ := range append(types, sandbox.TypeMessageUpdated, sandbox.TypeTurnCompleted) {
		if typ == sandbox.TypeTurnCompleted || typ == sandbox.TypeApprovalRequested {
			want = append(want, append(ids, more...)[i])
		}
	}
	got := rcv.waitAccepted(t, len(want))
	recs, err := st.Read(context.Background(), sb, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range got {
		id := d.eventID(t)
		if i < len(want) && id != want[i] {
			t.Errorf("delivery %d: event %d, want %d", i, id, want[i])
		}
		if got, want := d.WebhookID, webhook.WebhookID(ep.ID, sb, id); got != want {
			t.Errorf("delivery %d: webhook-id %q, want %q", i, got, want)
		}
		if d.Body.SandboxID != sb {
			t.Errorf("delivery %d: sandbox_id %q, want %q", i, d.Body.SandboxID, sb)
		}
		rec := recs[id-1]
		stored, err := rec.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if d.Body.Type != stored.Type || d.Body.TS != stored.TS.UTC().Format(sandbox.TimeFormat) || d.Body.TurnID == nil || *d.Body.TurnID != stored.TurnID {
			t.Errorf("delivery %d: %s, stored %s", i, d.Raw, rec.JSON)
		}
		if !strings.HasPrefix(string(d.Raw), `{"type":`) || !strings.Contains(string(rec.JSON), `"data":`+string(d.Body.Data)+"}") {
			t.Errorf("delivery %d: body %s does not carry the stored data of %s", i, d.Raw, rec.JSON)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d deliveries, want %d", len(got), len(want))
	}
}

// A receiver that fails, then recovers, gets every event once it
// recovers, in order; the retries carry the same webhook-id.
func TestLoop_RetryThenRecover(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	rcv.status = func(n int) int {
		switch {
		case n <= 3:
			return http.StatusInternalServerError
		case n == 6:
			return http.StatusServiceUnavailable
		case n == 7:
			return http.StatusFound // a redirect is not followed: a failure
		}
		return http.StatusOK
	}
	ep := newEndpoint(t, st, rcv.srv.URL)
	rcv.secret = ep.Secret
	var mu sync.Mutex
	var attempts []webhook.Attempt
	startLoop(t, st, webhook.Config{OnAttempt: func(a webhook.Attempt) {
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
	}})
	ids := appendEvents(t, st, sb, repeat(sandbox.TypeTurnCompleted, 6)...)

	got := rcv.waitAccepted(t, len(ids))
	var gotIDs []uint64
	for _, d := range got {
		gotIDs = append(gotIDs, d.eventID(t))
	}
	if !slices.Equal(gotIDs, ids) {
		t.Errorf("accepted events %v, want %v", gotIDs, ids)
	}
	rcv.mu.Lock()
	for _, d := range rcv.reqs {
		if want := webhook.WebhookID(ep.ID, sb, d.eventID(t)); d.WebhookID != want {
			t.Errorf("event %s: webhook-id %q, want %q", d.Body.ID, d.WebhookID, want)
		}
	}
	if len(rcv.reqs) != len(ids)+5 {
		t.Errorf("%d requests, want %d (5 failed)", len(rcv.reqs), len(ids)+5)
	}
	rcv.mu.Unlock()

	mu.Lock()
	defer mu.Unlock()
	failed := 0
	for _, a := range attempts {
		if !a.OK() {
			failed++
			if a.Next.IsZero() || a.Status == 0 {
				t.Errorf("failed attempt %+v: want its status and next attempt", a)
			}
		}
	}
	if failed != 5 {
		t.Errorf("%d failed attempts reported, want 5", failed)
	}
}

// An endpoint whose receiver does not answer delays no other: the other
// gets every event while the first holds its first request.
func TestLoop_SlowReceiverDelaysNoOther(t *testing.T) {
	st := openStore(t)
	sbs := []string{newSandbox(t, st), newSandbox(t, st)}
	slow, fast := newReceiver(t, ""), newReceiver(t, "")
	slow.hold = make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(slow.hold)
		}
	}
	t.Cleanup(release)
	epSlow := newEndpoint(t, st, slow.srv.URL)
	epFast := newEndpoint(t, st, fast.srv.URL)
	slow.secret, fast.secret = epSlow.Secret, epFast.Secret
	startLoop(t, st, webhook.Config{Concurrency: 1})
	for range 3 {
		for _, sb := range sbs {
			appendEvents(t, st, sb, sandbox.TypeTurnCompleted, sandbox.TypeApprovalRequested)
		}
	}

	fast.waitAccepted(t, 12)
	if n := len(slow.accepted()); n != 0 {
		t.Fatalf("the held receiver answered %d", n)
	}
	release()
	got := slow.waitAccepted(t, 12)
	per := map[string][]uint64{}
	for _, d := range got {
		per[d.Body.SandboxID] = append(per[d.Body.SandboxID], d.eventID(t))
	}
	for _, sb := range sbs {
		if want := []uint64{1, 2, 3, 4, 5, 6}; !slices.Equal(per[sb], want) {
			t.Errorf("sandbox %s: slow endpoint got %v, want %v", sb, per[sb], want)
		}
	}
}

// Signatures verify with the endpoint's secret only.
func TestSignature(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	ep := newEndpoint(t, st, rcv.srv.URL)
	rcv.secret = ep.Secret
	startLoop(t, st, webhook.Config{})
	appendEvents(t, st, sb, sandbox.TypeSandboxError)
	d := rcv.waitAccepted(t, 1)[0] // verified by the receiver

	if !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Errorf("secret %q lacks the whsec_ prefix", ep.Secret)
	}
	wh, err := standardwebhooks.NewWebhook(webhook.NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", d.WebhookID)
	h.Set("webhook-timestamp", "1")
	h.Set("webhook-signature", "v1,AAAA")
	if err := wh.VerifyIgnoringTimestamp(d.Raw, h); err == nil {
		t.Error("another secret verified the delivery")
	}
}

// The client refuses loopback, also by a name that resolves to it, and
// the loop then delivers nothing there.
func TestPrivateAddressRefused(t *testing.T) {
	rcv := newReceiver(t, webhook.NewSecret())
	port := rcv.srv.URL[strings.LastIndex(rcv.srv.URL, ":")+1:]
	client := webhook.NewClient(webhook.ClientOptions{})
	for _, url := range []string{rcv.srv.URL, "http://localhost:" + port + "/"} {
		resp, err := client.Post(url, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, webhook.ErrPrivateAddress) {
			t.Errorf("POST %s: %v, want %v", url, err, webhook.ErrPrivateAddress)
		}
	}

	st := openStore(t)
	sb := newSandbox(t, st)
	ep := newEndpoint(t, st, "http://localhost:"+port+"/")
	refusals := make(chan webhook.Attempt, 16)
	startLoop(t, st, webhook.Config{Client: client, OnAttempt: func(a webhook.Attempt) {
		select {
		case refusals <- a:
		default:
		}
	}})
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)
	a := <-refusals
	if a.OK() || !strings.Contains(a.Err, webhook.ErrPrivateAddress.Error()) || a.Endpoint != ep.ID {
		t.Errorf("attempt %+v, want refused", a)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.reqs) != 0 {
		t.Errorf("the receiver got %d requests", len(rcv.reqs))
	}
}

// The cursors outlive the loop and the store: a new loop over the same
// file delivers only what the last one had not.
func TestLoop_CursorKeptAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	ep := newEndpoint(t, st, rcv.srv.URL)
	rcv.secret = ep.Secret
	first := make(chan webhook.Attempt, 16)
	l := webhook.New(webhook.Config{Store: st, Log: st, Client: webhook.NewClient(webhook.ClientOptions{AllowPrivate: true}),
		Interval: 10 * time.Millisecond, OnAttempt: func(a webhook.Attempt) { first <- a }})
	l.Start()
	before := appendEvents(t, st, sb, repeat(sandbox.TypeTurnCompleted, 3)...)
	for range before {
		if a := <-first; !a.OK() {
			t.Fatalf("attempt %+v failed", a)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = bolttest.MustOpenAt(t, path, boltstore.Options{})
	after := appendEvents(t, st, sb, repeat(sandbox.TypeTurnCompleted, 2)...)
	startLoop(t, st, webhook.Config{})
	got := rcv.waitAccepted(t, len(before)+len(after))
	var ids []uint64
	for _, d := range got {
		ids = append(ids, d.eventID(t))
	}
	if want := append(before, after...); !slices.Equal(ids, want) {
		t.Errorf("events delivered %v, want %v (each once)", ids, want)
	}
}

// An event failing for longer than DisableAfter disables its endpoint,
// with the reason in its record.
func TestLoop_DisableAfter(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	rcv.status = func(int) int { return http.StatusBadGateway }
	rcv.anyTime = true
	ep := newEndpoint(t, st, rcv.srv.URL)
	rcv.secret = ep.Secret
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { // an hour passes between attempts
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Hour)
		return clock
	}
	attempts := make(chan webhook.Attempt, 16)
	startLoop(t, st, webhook.Config{Now: now, DisableAfter: 3 * time.Hour, OnAttempt: func(a webhook.Attempt) { attempts <- a }})
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)

	n := 0
	for a := range attempts {
		n++
		if a.OK() {
			t.Fatalf("attempt %+v succeeded", a)
		}
		if a.Next.IsZero() {
			break // the last one
		}
	}
	if n != 4 {
		t.Errorf("%d attempts, want 4 (the first, then one an hour for 3 h)", n)
	}
	got, err := webhook.Get(context.Background(), st, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Enabled || !strings.Contains(got.DisabledReason, "502") {
		t.Errorf("endpoint enabled %v, reason %q; want disabled naming the 502", got.Enabled, got.DisabledReason)
	}
}
