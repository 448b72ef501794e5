package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The delivery client follows no redirect, keeps only the start of a
// response's body, and gives up on a receiver that does not answer
// within its request timeout.
func TestClientBounds(t *testing.T) {
	followed := make(chan struct{}, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		followed <- struct{}{}
	}))
	t.Cleanup(target.Close)
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
		case "/big":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
		case "/silent":
			<-release
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) })

	st := openStore(t)
	sb := newSandbox(t, st)
	client := webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, RequestTimeout: 200 * time.Millisecond})
	attempts := make(chan webhook.Attempt, 16)
	l := startLoop(t, st, webhook.Config{Client: client, MinBackoff: time.Hour, MaxBackoff: time.Hour,
		OnAttempt: func(a webhook.Attempt) { attempts <- a }})
	ctx := context.Background()
	for _, path := range []string{"/redirect", "/big", "/silent"} {
		if _, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rcv.URL + path}); err != nil {
			t.Fatal(err)
		}
	}
	appendEvents(t, st, sb, sandbox.TypeTurnCompleted)
	seen := map[string]webhook.Attempt{}
	for len(seen) < 3 {
		a := <-attempts
		w, err := l.Webhook(ctx, a.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		seen[w.URL[len(rcv.URL):]] = a
	}
	if a := seen["/redirect"]; a.OK() || a.Status != http.StatusTemporaryRedirect {
		t.Errorf("redirect: %+v, want a failed attempt with the 307", a)
	}
	select {
	case <-followed:
		t.Error("the redirect was followed")
	default:
	}
	if a := seen["/big"]; a.OK() || a.Status != http.StatusInternalServerError || len(a.Excerpt) != 256 {
		t.Errorf("big body: status %d, excerpt of %d bytes, want 500 and 256", a.Status, len(a.Excerpt))
	}
	if a := seen["/silent"]; a.OK() || a.Status != 0 || !strings.Contains(a.Err, "Timeout") {
		t.Errorf("silent receiver: %+v, want a timeout", a)
	}
}
