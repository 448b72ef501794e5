package webhook_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A registration is checked: the URL's scheme and host, every event type,
// the sandbox; a host that is or resolves to a private address is refused
// unless private addresses are allowed.
func TestCreateWebhook_Invalid(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	l := webhook.New(webhook.Config{Store: st, Log: st})
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		p    sandbox.WebhookParams
		want string
	}{
		{"NoURL", sandbox.WebhookParams{}, "url is required"},
		{"Scheme", sandbox.WebhookParams{URL: "ftp://example.com/x"}, "only http and https"},
		{"Relative", sandbox.WebhookParams{URL: "/hooks"}, "only http and https"},
		{"NoHost", sandbox.WebhookParams{URL: "http:///x"}, "no host"},
		{"Credentials", sandbox.WebhookParams{URL: "https://u:p@example.com/"}, "credentials"},
		{"Loopback", sandbox.WebhookParams{URL: "http://127.0.0.1:9/"}, "--webhook-allow-private"},
		{"Private", sandbox.WebhookParams{URL: "http://10.1.2.3/"}, "--webhook-allow-private"},
		{"LinkLocal", sandbox.WebhookParams{URL: "http://[fe80::1]/"}, "--webhook-allow-private"},
		{"Metadata", sandbox.WebhookParams{URL: "http://169.254.169.254/latest"}, "--webhook-allow-private"},
		{"NameOfLoopback", sandbox.WebhookParams{URL: "http://localhost:9/"}, "127.0.0.1"},
		{"EphemeralType", sandbox.WebhookParams{URL: "https://example.com/", Events: []sandbox.Type{"message.delta"}}, "not a durable event type"},
		{"UnknownType", sandbox.WebhookParams{URL: "https://example.com/", Events: []sandbox.Type{"turn.finished"}}, "not a durable event type"},
		{"Sandbox", sandbox.WebhookParams{URL: "https://example.com/", SandboxID: "sbx_nothere"}, "sandbox sbx_nothere not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := l.CreateWebhook(ctx, tt.p)
			if !sandbox.IsType(err, sandbox.EInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want invalid_request saying %q", err, tt.want)
			}
		})
	}
	list, err := l.Webhooks(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("after refusals: %d endpoints, %v", len(list), err)
	}
	allowed := webhook.New(webhook.Config{Store: st, Log: st, AllowPrivate: true})
	created, err := allowed.CreateWebhook(ctx, sandbox.WebhookParams{URL: "http://localhost:9/h", SandboxID: sb,
		Events: []sandbox.Type{sandbox.TypeTurnCompleted, sandbox.TypeTurnCompleted}})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Events) != 1 || !strings.HasPrefix(created.Secret, "whsec_") || !created.Enabled || created.State != sandbox.WebhookActive {
		t.Fatalf("created %+v", created)
	}
}

// The secret is in the answers of creation and rotation only; after a
// rotation, deliveries verify with the new secret and not the old.
func TestWebhookSecret_Rotation(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	attempts := make(chan webhook.Attempt, 16)
	l := startLoop(t, st, webhook.Config{OnAttempt: func(a webhook.Attempt) { attempts <- a }})
	ctx := context.Background()
	created, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rcv.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = created.Secret
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)
	rcv.waitAccepted(t, 1)
	<-attempts

	rotated, err := l.RotateWebhookSecret(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == created.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") {
		t.Fatalf("rotated secret %q", rotated.Secret)
	}
	old, err := standardwebhooks.NewWebhook(created.Secret)
	if err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	rcv.secret = rotated.Secret
	rcv.mu.Unlock()
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)
	got := rcv.waitAccepted(t, 2)
	last := got[1]
	h := http.Header{}
	h.Set("webhook-id", last.WebhookID)
	h.Set("webhook-timestamp", last.Timestamp)
	h.Set("webhook-signature", last.Signature)
	if err := old.Verify(last.Raw, h); err == nil {
		t.Fatal("a delivery after the rotation verifies with the old secret")
	}
	<-attempts // recorded before it is told
	w, err := l.Webhook(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if w.Stats.Delivered != 2 || w.Stats.Failed != 0 || w.Stats.OldestUndeliveredAt != nil || w.Stats.LastAttempt == nil || w.Stats.LastAttempt.StatusCode != http.StatusNoContent {
		t.Fatalf("stats %+v", w.Stats)
	}
}

// A retry of the event a worker waits to try again is made at once by
// that worker, which then goes on in order; a retry of a delivered event
// sends it again with the same webhook-id.
func TestRetryWebhookDelivery(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	rcv.status = func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	// A backoff far longer than any test: only the retry moves it.
	attempts := make(chan webhook.Attempt, 16)
	l := startLoop(t, st, webhook.Config{MinBackoff: time.Hour, MaxBackoff: time.Hour,
		OnAttempt: func(a webhook.Attempt) { attempts <- a }})
	ctx := context.Background()
	created, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rcv.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = created.Secret
	ids := appendEvents(t, st, sb, sandbox.TypeTurnCompleted, sandbox.TypeSandboxError)
	if a := <-attempts; a.OK() { // recorded before it is told
		t.Fatalf("first attempt %+v, want refused", a)
	}
	w, err := l.Webhook(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if w.State != sandbox.WebhookFailing || w.Stats.Failed != 1 || w.Stats.OldestUndeliveredAt == nil || w.Stats.Lag == 0 {
		t.Fatalf("failing endpoint's stats %+v", w.Stats)
	}
	ds, err := l.WebhookDeliveries(ctx, created.ID)
	if err != nil || len(ds) != 1 || ds[0].StatusCode != http.StatusServiceUnavailable || ds[0].NextAttemptAt == nil {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	d, err := l.RetryWebhookDelivery(ctx, created.ID, ds[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.StatusCode != http.StatusOK || d.Attempt != 2 || d.EventID != sandbox.Seq(ids[0]) {
		t.Fatalf("retry answered %+v", d)
	}
	got := rcv.waitAccepted(t, 2)
	if got[0].eventID(t) != ids[0] || got[1].eventID(t) != ids[1] {
		t.Fatalf("after the retry: events %d, %d", got[0].eventID(t), got[1].eventID(t))
	}

	again, err := l.RetryWebhookDelivery(ctx, created.ID, ds[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.StatusCode != http.StatusOK || again.ID != ds[0].ID {
		t.Fatalf("redelivery answered %+v", again)
	}
	if got := rcv.waitAccepted(t, 3); got[2].WebhookID != ds[0].ID {
		t.Fatalf("redelivery's webhook-id %q, want %q", got[2].WebhookID, ds[0].ID)
	}
	for _, bad := range []string{"nope", created.ID + "_" + sb + "_x", created.ID + "_" + sb + "_999"} {
		if _, err := l.RetryWebhookDelivery(ctx, created.ID, bad); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Errorf("retry of %q: %v, want not_found", bad, err)
		}
	}
}

// Disabling stops deliveries; enabling resumes them from the cursor,
// every event once; deleting answers not_found after.
func TestUpdateWebhook_DisableEnableDelete(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	l := startLoop(t, st, webhook.Config{})
	ctx := context.Background()
	created, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rcv.srv.URL, Description: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = created.Secret
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)
	rcv.waitAccepted(t, 1)
	off := false
	w, err := l.UpdateWebhook(ctx, created.ID, sandbox.WebhookPatch{Enabled: &off})
	if err != nil || w.Enabled || w.State != sandbox.WebhookDisabled || w.Description != "ci" {
		t.Fatalf("disabled: %+v, %v", w, err)
	}
	ids := appendEvents(t, st, sb, sandbox.TypeTurnCompleted, sandbox.TypeTurnCompleted)
	on := true
	if _, err := l.UpdateWebhook(ctx, created.ID, sandbox.WebhookPatch{Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	got := rcv.waitAccepted(t, 3)
	if got[1].eventID(t) != ids[0] || got[2].eventID(t) != ids[1] {
		t.Fatalf("after enabling: events %d, %d, want %v", got[1].eventID(t), got[2].eventID(t), ids)
	}
	bad := "gopher://x"
	if _, err := l.UpdateWebhook(ctx, created.ID, sandbox.WebhookPatch{URL: &bad}); !sandbox.IsType(err, sandbox.EInvalidRequest) {
		t.Fatalf("patch to %s: %v", bad, err)
	}
	if _, err := l.DeleteWebhook(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Webhook(ctx, created.ID); !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := l.WebhookDeliveries(ctx, created.ID); !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("deliveries after delete: %v", err)
	}
}

// On a shared store a node starts delivering a sandbox it takes over from
// the cursor the previous holder saved, not from the cursors it read when
// the endpoint's deliveries started here.
func TestLoop_TakeoverResumesFromStoredCursor(t *testing.T) {
	st := openStore(t)
	sb := newSandbox(t, st)
	rcv := newReceiver(t, "")
	ep := newEndpoint(t, st, rcv.srv.URL)
	rcv.secret = ep.Secret
	var mu sync.Mutex
	held := false
	holds := func(string) bool {
		mu.Lock()
		defer mu.Unlock()
		return held
	}
	ids := appendEvents(t, st, sb, sandbox.TypeTurnCompleted, sandbox.TypeTurnCompleted, sandbox.TypeTurnCompleted)
	scans := make(chan struct{}, 1)
	startLoop(t, st, webhook.Config{Holds: holds, Claim: func(context.Context, string) (bool, error) {
		select {
		case scans <- struct{}{}: // the loop looked at the sandbox and did not take it
		default:
		}
		return false, nil
	}})
	<-scans
	// Another node delivered the first two meanwhile.
	if err := st.SetWebhookCursor(context.Background(), ep.ID, sb, ids[1]); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	held = true
	mu.Unlock()
	got := rcv.waitAccepted(t, 1)
	if id := got[0].eventID(t); id != ids[2] {
		t.Fatalf("first delivery after the takeover: event %d, want %d", id, ids[2])
	}
}
