package web_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/server"
)

// fakeWebhooks is a server.Webhooks of fixed endpoints and attempts: the
// console only reads them, retries a delivery and switches an endpoint,
// and what it shows must be what the API answered.
type fakeWebhooks struct {
	mu         sync.Mutex
	hooks      []sandbox.Webhook
	deliveries map[string][]sandbox.WebhookDelivery // newest first
	retried    []string
	patches    []sandbox.WebhookPatch
}

var _ server.Webhooks = (*fakeWebhooks)(nil)

func withWebhooks(w server.Webhooks) serverOption {
	return func(s *sparkles) { s.webhooks = w }
}

func (f *fakeWebhooks) find(id string) (int, error) {
	i := slices.IndexFunc(f.hooks, func(w sandbox.Webhook) bool { return w.ID == id })
	if i < 0 {
		return 0, sandbox.Errorf(sandbox.ENotFound, "webhook %s not found", id)
	}
	return i, nil
}

func (f *fakeWebhooks) CreateWebhook(context.Context, sandbox.WebhookParams) (sandbox.CreatedWebhook, error) {
	return sandbox.CreatedWebhook{}, sandbox.Errorf(sandbox.EInvalidRequest, "the console creates no endpoint")
}

func (f *fakeWebhooks) Webhook(_ context.Context, id string) (sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	return f.hooks[i], nil
}

func (f *fakeWebhooks) Webhooks(context.Context) ([]sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hooks), nil
}

func (f *fakeWebhooks) UpdateWebhook(_ context.Context, id string, p sandbox.WebhookPatch) (sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	f.patches = append(f.patches, p)
	if p.Enabled != nil {
		w := &f.hooks[i]
		w.Enabled = *p.Enabled
		w.DisabledReason = ""
		w.State = sandbox.WebhookActive
		if !w.Enabled {
			w.State = sandbox.WebhookDisabled
		}
	}
	return f.hooks[i], nil
}

func (f *fakeWebhooks) DeleteWebhook(_ context.Context, id string) (sandbox.Webhook, error) {
	return sandbox.Webhook{}, sandbox.Errorf(sandbox.EInvalidRequest, "the console deletes no endpoint")
}

func (f *fakeWebhooks) RotateWebhookSecret(_ context.Context, id string) (sandbox.CreatedWebhook, error) {
	return sandbox.CreatedWebhook{}, sandbox.Errorf(sandbox.EInvalidRequest, "the console rotates no secret")
}

func (f *fakeWebhooks) WebhookDeliveries(_ context.Context, id string) ([]sandbox.WebhookDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(id); err != nil {
		return nil, err
	}
	return slices.Clone(f.deliveries[id]), nil
}

// RetryWebhookDelivery succeeds: the receiver is back.
func (f *fakeWebhooks) RetryWebhookDelivery(_ context.Context, id, delivery string) (sandbox.WebhookDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return sandbox.WebhookDelivery{}, err
	}
	list := f.deliveries[id]
	j := slices.IndexFunc(list, func(d sandbox.WebhookDelivery) bool { return d.ID == delivery })
	if j < 0 {
		return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.ENotFound, "delivery %s not found", delivery)
	}
	f.retried = append(f.retried, delivery)
	d := list[j]
	d.Attempt++
	d.At = time.Now().UTC()
	d.StatusCode, d.DurationMS, d.Error, d.Response, d.NextAttemptAt = 204, 7, "", "", nil
	f.deliveries[id] = append([]sandbox.WebhookDelivery{d}, list...)
	w := &f.hooks[i]
	w.Stats.Delivered++
	w.Stats.LastAttempt = &d
	return d, nil
}

// update changes the endpoints as deliveries would, behind the page's back.
func (f *fakeWebhooks) update(fn func(hooks []sandbox.Webhook)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.hooks)
}

func newFakeWebhooks() *fakeWebhooks {
	now := time.Now().UTC().Truncate(time.Millisecond)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	events := []sandbox.Type{sandbox.TypeTurnCompleted, sandbox.TypeApprovalRequested, sandbox.TypeSandboxError}
	failed := sandbox.WebhookDelivery{Object: "webhook_delivery", ID: "wh_fail_sb_01_7", SandboxID: "sb_01", EventID: 7,
		Type: sandbox.TypeTurnCompleted, Attempt: 2, At: now.Add(-time.Second), StatusCode: 502, DurationMS: 31,
		Error: "the receiver answered 502", Response: "<h1>Bad Gateway</h1>", NextAttemptAt: at(30 * time.Minute)}
	first := failed
	first.Attempt, first.At, first.NextAttemptAt = 1, now.Add(-6*time.Second), at(-time.Second)
	ok := sandbox.WebhookDelivery{Object: "webhook_delivery", ID: "wh_ok_sb_01_5", SandboxID: "sb_01", EventID: 5,
		Type: sandbox.TypeApprovalRequested, Attempt: 1, At: now.Add(-time.Minute), StatusCode: 200, DurationMS: 12}
	return &fakeWebhooks{
		hooks: []sandbox.Webhook{
			{Object: "webhook", ID: "wh_ok", URL: "https://hooks.example/ok", Events: events, Enabled: true,
				State: sandbox.WebhookActive, CreatedAt: now.Add(-time.Hour), Description: "chat bot",
				Stats: sandbox.WebhookStats{Delivered: 12, LastAttempt: &ok}},
			{Object: "webhook", ID: "wh_fail", URL: "https://ci.example/hook", Events: []sandbox.Type{sandbox.TypeTurnCompleted},
				SandboxID: "sb_01", Enabled: true, State: sandbox.WebhookFailing, CreatedAt: now.Add(-time.Hour),
				Stats: sandbox.WebhookStats{Delivered: 3, Failed: 2, Lag: 4, OldestUndeliveredAt: at(-10 * time.Minute), LastAttempt: &failed}},
			{Object: "webhook", ID: "wh_off", URL: "https://gone.example/hook", Events: events, Enabled: false,
				State: sandbox.WebhookDisabled, DisabledReason: "event 9 of sb_02 failed for 72h0m0s: <b>502</b>",
				CreatedAt: now.Add(-96 * time.Hour), Stats: sandbox.WebhookStats{Failed: 40, Lag: 1}},
		},
		deliveries: map[string][]sandbox.WebhookDelivery{"wh_ok": {ok}, "wh_fail": {failed, first}},
	}
}

// itemJS is a JavaScript expression for an endpoint's item in the list.
func itemJS(id string) string {
	return fmt.Sprintf(`document.querySelector('#webhook-list .wh-item[data-webhook-id="%s"]')`, id)
}

// TestBrowserWebhooks opens the webhooks view from the main view and
// drives it against the server's /v1/webhooks routes: each endpoint's
// state in its colour, its figures and last attempt, its deliveries, a
// retry, a disable, and the view reading the list again on its own.
func TestBrowserWebhooks(t *testing.T) {
	b := newBrowser(t)
	f := newFakeWebhooks()
	s := startSparkles(t, withWebhooks(f))

	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken))
	b.do("open the webhooks view from the main view",
		chromedp.WaitVisible(chromedp.ID("webhooks-link")),
		chromedp.Click(chromedp.ID("webhooks-link")),
		chromedp.WaitVisible(chromedp.ID("webhooks")),
	)
	if got, want := eval[string](b, `location.hash`), "#/webhooks"; got != want {
		t.Fatalf("address %q, want %q", got, want)
	}
	b.untilJSON("every endpoint with its state", `[...document.querySelectorAll('#webhook-list .wh-item')].map(li =>
		[li.dataset.webhookId, li.querySelector('.wh-url').textContent, li.querySelector('.badge').textContent])`,
		`[["wh_ok","https://hooks.example/ok","active"],["wh_fail","https://ci.example/hook","failing"],["wh_off","https://gone.example/hook","disabled"]]`)
	colours := eval[[]string](b, `[...document.querySelectorAll('#webhook-list .wh-item .badge')].map(e => getComputedStyle(e).color)`)
	if len(colours) != 3 || colours[0] == colours[1] || colours[1] == colours[2] || colours[0] == colours[2] {
		t.Fatalf("active, failing and disabled badges have the colours %q, want three", colours)
	}
	b.untilJSON("what the failing endpoint receives and its figures", fmt.Sprintf(`[...%s.querySelectorAll('.wh-events, .wh-filter, .wh-stats, .wh-last-words')].map(e => e.textContent)`, itemJS("wh_fail")),
		`["turn.completed","sandbox sb_01","3 delivered · 2 failed · 4 events behind · oldest undelivered 10 min old","failed (attempt 2) · turn.completed · 502 · 31 ms · the receiver answered 502 · next attempt in 30 min"]`)
	// The reason is the API's text, shown as text.
	b.untilJSON("the disabled endpoint says why", fmt.Sprintf(`[%[1]s.querySelector('.wh-reason').textContent, %[1]s.querySelector('.wh-reason b')]`, itemJS("wh_off")),
		`["Disabled: event 9 of sb_02 failed for 72h0m0s: <b>502</b>",null]`)

	b.do("open the failing endpoint", chromedp.Click(chromedp.CSS(`.wh-item[data-webhook-id="wh_fail"] .wh-expand`)))
	rowsJS := fmt.Sprintf(`[...%s.querySelectorAll('.wh-delivery')].map(tr => [...tr.cells].slice(1, 8).map(c => c.textContent))`, itemJS("wh_fail"))
	b.untilJSON("its attempts, newest first", rowsJS,
		`[["wh_fail_sb_01_7","turn.completed","2","502","31 ms","the receiver answered 502<h1>Bad Gateway</h1>","in 30 min"],`+
			`["wh_fail_sb_01_7","turn.completed","1","502","31 ms","the receiver answered 502<h1>Bad Gateway</h1>","due now"]]`)
	if got := eval[int](b, itemJS("wh_fail")+`.querySelectorAll('.wh-retry').length`); got != 1 {
		t.Fatalf("%d Retry buttons for one delivery, want 1", got)
	}

	b.do("retry the delivery", chromedp.Click(chromedp.CSS(`.wh-item[data-webhook-id="wh_fail"] .wh-retry`)))
	b.untilJSON("the new attempt is listed first", rowsJS+`[0]`, `["wh_fail_sb_01_7","turn.completed","3","204","7 ms","",""]`)
	f.mu.Lock()
	retried := slices.Clone(f.retried)
	f.mu.Unlock()
	if got, want := fmt.Sprint(retried), "[wh_fail_sb_01_7]"; got != want {
		t.Fatalf("retried %s, want %s", got, want)
	}
	b.untilJSON("the figures follow", itemJS("wh_fail")+`.querySelector('.wh-stats').textContent`,
		`"4 delivered · 2 failed · 4 events behind · oldest undelivered 10 min old"`)

	enable := chromedp.CSS(`.wh-item[data-webhook-id="wh_fail"] .wh-enable`)
	b.untilJSON("the switch offers to disable", itemJS("wh_fail")+`.querySelector('.wh-enable').textContent`, `"Disable"`)
	b.do("disable the endpoint", chromedp.Click(enable))
	b.untilJSON("the endpoint is disabled", fmt.Sprintf(`[%[1]s.querySelector('.badge').textContent, %[1]s.querySelector('.wh-enable').textContent]`, itemJS("wh_fail")),
		`["disabled","Enable"]`)
	f.mu.Lock()
	patches := slices.Clone(f.patches)
	f.mu.Unlock()
	if len(patches) != 1 || patches[0].Enabled == nil || *patches[0].Enabled || patches[0].URL != nil || patches[0].Events != nil {
		t.Fatalf("patches %+v, want one {enabled: false}", patches)
	}

	// Deliveries go on while the view is open: it reads them again.
	f.update(func(hooks []sandbox.Webhook) { hooks[0].Stats.Delivered = 99 })
	b.untilJSON("the view reads the list again", itemJS("wh_ok")+`.querySelector('.wh-stats').textContent`, `"99 delivered · 0 failed · up to date"`)

	if got := b.unnamedControls(); len(got) > 0 {
		t.Fatalf("controls without a name: %v", got)
	}
	b.noConsoleErrors()

	b.do("back to the sandboxes", chromedp.Navigate(s.URL+"/#/"))
	b.untilJSON("the view is closed", `[document.getElementById('webhooks').hidden, document.getElementById('app').dataset.view, document.title]`,
		`[true,"list","Sparkles"]`)

	// A phone shows the view alone, with the way back.
	b.viewport(390, 844)
	b.do("open the view on a phone", chromedp.Click(chromedp.ID("webhooks-link")), chromedp.WaitVisible(chromedp.CSS(`#webhooks .back`)))
	if got := eval[bool](b, `document.querySelector('.sidebar').checkVisibility()`); got {
		t.Fatal("the sandbox list shows beside the webhooks view on a phone")
	}
}

// TestBrowserWebhooksNotServed: a server that delivers no webhooks answers
// 404, and the view says so instead of an empty list.
func TestBrowserWebhooksNotServed(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.do("open the webhooks view", chromedp.Navigate(s.URL+"/#token="+testToken), chromedp.WaitVisible(chromedp.ID("webhooks-link")),
		chromedp.Click(chromedp.ID("webhooks-link")))
	b.untilJSON("the view says why it is empty", `[document.getElementById('webhooks-status').textContent, document.querySelectorAll('#webhook-list li').length]`,
		`["This server does not deliver webhooks.",0]`)
}
