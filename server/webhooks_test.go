package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// fakeWebhooks is an in-memory Webhooks: endpoints, their secrets and a
// delivery log the tests fill, with the checks of the contract that the
// handlers leave to the backend (URL, event types, sandbox).
type fakeWebhooks struct {
	mu         sync.Mutex
	endpoints  map[string]*sandbox.CreatedWebhook
	deliveries map[string][]sandbox.WebhookDelivery // by endpoint, newest first
	sandboxes  map[string]bool                      // the sandboxes that exist
	calls      int                                  // calls that reached the backend
	fail       error                                // when set, every call answers it
	n          int
}

func newFakeWebhooks(sandboxIDs ...string) *fakeWebhooks {
	f := &fakeWebhooks{endpoints: map[string]*sandbox.CreatedWebhook{}, deliveries: map[string][]sandbox.WebhookDelivery{}, sandboxes: map[string]bool{}}
	for _, id := range sandboxIDs {
		f.sandboxes[id] = true
	}
	return f
}

// fakeTime is the time of every endpoint and attempt of the fake.
var fakeTime = time.Date(2025, 6, 1, 12, 0, 0, 123e6, time.UTC)

// enter counts a call and answers the failure set for every call, if any.
func (f *fakeWebhooks) enter() error {
	f.calls++
	return f.fail
}

func (f *fakeWebhooks) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeWebhooks) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "url %q is not an absolute http or https URL", raw)
	}
	return nil
}

func checkEvents(events []sandbox.Type) error {
	for _, t := range events {
		if !t.Durable() {
			return sandbox.Errorf(sandbox.EInvalidRequest, "event type %q is not a durable event type", t)
		}
	}
	return nil
}

func (f *fakeWebhooks) newSecret() string {
	f.n++
	return fmt.Sprintf("whsec_c2VjcmV0LW51bWJlci0%08d", f.n)
}

func (f *fakeWebhooks) CreateWebhook(_ context.Context, p sandbox.WebhookParams) (sandbox.CreatedWebhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(); err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	if err := f.checkURL(p.URL); err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	if err := checkEvents(p.Events); err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	if p.SandboxID != "" && !f.sandboxes[p.SandboxID] {
		return sandbox.CreatedWebhook{}, sandbox.Errorf(sandbox.EInvalidRequest, "no sandbox %s", p.SandboxID)
	}
	events := p.Events
	if len(events) == 0 {
		events = slices.Clone(sandbox.DefaultWebhookEvents)
	}
	wh := &sandbox.CreatedWebhook{Webhook: sandbox.Webhook{
		Object: "webhook", ID: sandbox.NewID("wh_"), URL: p.URL, Events: events, SandboxID: p.SandboxID,
		Description: p.Description, Enabled: true, State: sandbox.WebhookActive, CreatedAt: fakeTime,
	}, Secret: f.newSecret()}
	f.endpoints[wh.ID] = wh
	return *wh, nil
}

func (f *fakeWebhooks) endpoint(id string) (*sandbox.CreatedWebhook, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	wh, ok := f.endpoints[id]
	if !ok {
		return nil, sandbox.Errorf(sandbox.ENotFound, "no webhook endpoint %s", id)
	}
	return wh, nil
}

func (f *fakeWebhooks) Webhook(_ context.Context, id string) (sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wh, err := f.endpoint(id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	return wh.Webhook, nil
}

func (f *fakeWebhooks) Webhooks(context.Context) ([]sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(); err != nil {
		return nil, err
	}
	var out []sandbox.Webhook
	for _, wh := range f.endpoints {
		out = append(out, wh.Webhook)
	}
	slices.SortFunc(out, func(a, b sandbox.Webhook) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (f *fakeWebhooks) UpdateWebhook(_ context.Context, id string, p sandbox.WebhookPatch) (sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wh, err := f.endpoint(id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	if p.URL != nil {
		if err := f.checkURL(*p.URL); err != nil {
			return sandbox.Webhook{}, err
		}
		wh.URL = *p.URL
	}
	if p.Events != nil {
		if err := checkEvents(p.Events); err != nil {
			return sandbox.Webhook{}, err
		}
		wh.Events = p.Events
	}
	if p.Description != nil {
		wh.Description = *p.Description
	}
	if p.Enabled != nil {
		wh.Enabled = *p.Enabled
		wh.State, wh.DisabledReason = sandbox.WebhookDisabled, ""
		if wh.Enabled {
			wh.State = sandbox.WebhookActive
		}
	}
	return wh.Webhook, nil
}

func (f *fakeWebhooks) DeleteWebhook(_ context.Context, id string) (sandbox.Webhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wh, err := f.endpoint(id)
	if err != nil {
		return sandbox.Webhook{}, err
	}
	delete(f.endpoints, id)
	delete(f.deliveries, id)
	return wh.Webhook, nil
}

func (f *fakeWebhooks) RotateWebhookSecret(_ context.Context, id string) (sandbox.CreatedWebhook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wh, err := f.endpoint(id)
	if err != nil {
		return sandbox.CreatedWebhook{}, err
	}
	wh.Secret = f.newSecret()
	return *wh, nil
}

func (f *fakeWebhooks) WebhookDeliveries(_ context.Context, id string) ([]sandbox.WebhookDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.endpoint(id); err != nil {
		return nil, err
	}
	return slices.Clone(f.deliveries[id]), nil
}

func (f *fakeWebhooks) RetryWebhookDelivery(_ context.Context, id, delivery string) (sandbox.WebhookDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.endpoint(id); err != nil {
		return sandbox.WebhookDelivery{}, err
	}
	i := slices.IndexFunc(f.deliveries[id], func(d sandbox.WebhookDelivery) bool { return d.ID == delivery })
	if i < 0 {
		return sandbox.WebhookDelivery{}, sandbox.Errorf(sandbox.ENotFound, "no delivery %s of webhook endpoint %s", delivery, id)
	}
	d := f.deliveries[id][i]
	d.Attempt++
	d.StatusCode, d.Error, d.Response, d.NextAttemptAt = http.StatusNoContent, "", "", nil
	f.deliveries[id] = append([]sandbox.WebhookDelivery{d}, f.deliveries[id]...)
	return d, nil
}

// failed records a failed attempt to deliver event eventID of sandboxID
// to endpoint id, as the delivery loop would, and returns it.
func (f *fakeWebhooks) failed(id, sandboxID string, eventID sandbox.Seq) sandbox.WebhookDelivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := fakeTime.Add(5 * time.Second)
	d := sandbox.WebhookDelivery{
		Object: "webhook_delivery", ID: id + "_" + sandboxID + "_" + sandbox.FormatID(uint64(eventID)), SandboxID: sandboxID,
		EventID: eventID, Type: sandbox.TypeTurnCompleted, Attempt: 1, At: fakeTime, StatusCode: http.StatusServiceUnavailable,
		DurationMS: 12, Error: "the receiver answered 503 Service Unavailable", Response: "try later", NextAttemptAt: &next,
	}
	f.deliveries[id] = append([]sandbox.WebhookDelivery{d}, f.deliveries[id]...)
	return d
}

// Ids of the right shape that name nothing.
const (
	noWebhook  = "wh_00000000000000000000000000"
	noDelivery = noWebhook + "_c_00000000000000000000000000_1"
)

// webhookHarness is the harness with the fake behind /v1/webhooks.
func webhookHarness(t *testing.T) (*harness, *fakeWebhooks) {
	t.Helper()
	f := newFakeWebhooks()
	h := newHarness(t, options{webhooks: f})
	return h, f
}

// createWebhook registers an endpoint of url and returns the answer.
func (h *harness) createWebhook(body any) sandbox.CreatedWebhook {
	h.t.Helper()
	var c sandbox.CreatedWebhook
	h.ok(http.MethodPost, "/v1/webhooks", body, http.StatusCreated, &c)
	return c
}

// noSecret checks that an answer carries no secret: neither the field nor
// the value.
func noSecret(t *testing.T, resp response, secret string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(resp.body, &m); err != nil {
		t.Fatalf("answer %s: %v", resp.body, err)
	}
	if _, ok := m["secret"]; ok || strings.Contains(string(resp.body), secret) {
		t.Fatalf("the answer carries the secret: %s", resp.body)
	}
}

func TestWebhooksCreate(t *testing.T) {
	h, f := webhookHarness(t)
	sb := h.createSandbox()
	f.mu.Lock()
	f.sandboxes[sb.ID] = true
	f.mu.Unlock()
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodPost, "/v1/webhooks", h.token, `{"url":"https://example.com/hook","description":"chat bot"}`)
		if got, want := resp.status, http.StatusCreated; got != want {
			t.Fatalf("status %d, want %d: %s", got, want, resp.body)
		}
		if got, want := resp.header.Get("Cache-Control"), "no-store"; got != want {
			t.Fatalf("Cache-Control %q, want %q: the answer carries the secret", got, want)
		}
		var c sandbox.CreatedWebhook
		if err := json.Unmarshal(resp.body, &c); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.ID, "wh_") || c.Object != "webhook" || c.URL != "https://example.com/hook" || c.Description != "chat bot" {
			t.Fatalf("answer %s", resp.body)
		}
		if !strings.HasPrefix(c.Secret, "whsec_") {
			t.Fatalf("secret %q, want whsec_…", c.Secret)
		}
		if !slices.Equal(c.Events, sandbox.DefaultWebhookEvents) {
			t.Fatalf("events %v, want the default %v", c.Events, sandbox.DefaultWebhookEvents)
		}
		if !c.Enabled || c.State != sandbox.WebhookActive {
			t.Fatalf("enabled %v state %q, want an active endpoint", c.Enabled, c.State)
		}
	})
	t.Run("OKEventsAndSandbox", func(t *testing.T) {
		c := h.createWebhook(map[string]any{"url": "http://example.com/x", "events": []string{"turn.started", "tool.updated"}, "sandbox_id": sb.ID})
		if got, want := c.Events, []sandbox.Type{sandbox.TypeTurnStarted, sandbox.TypeToolUpdated}; !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		if got, want := c.SandboxID, sb.ID; got != want {
			t.Fatalf("sandbox_id %q, want %q", got, want)
		}
	})
	// Bodies the handler refuses before the backend sees them.
	for _, tt := range []struct {
		name, body, inMessage string
	}{
		{"ErrBadJSON", `{"url":`, "not valid JSON"},
		{"ErrSyntax", `{"url" 1}`, "not valid JSON"},
		{"ErrUnknownField", `{"url":"https://example.com","secret":"whsec_mine"}`, `unknown field "secret"`},
		{"ErrWrongType", `{"url":1}`, `"url"`},
		{"ErrEventsNotList", `{"url":"https://example.com","events":"turn.completed"}`, `"events"`},
		{"ErrNotObject", `["https://example.com"]`, "JSON object"},
		{"ErrTrailingData", `{"url":"https://example.com"} {}`, "after the JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := f.callCount()
			e := h.request(http.MethodPost, "/v1/webhooks", h.token, tt.body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
			if !strings.Contains(e.Error.Message, tt.inMessage) {
				t.Fatalf("message %q does not name the problem (%q)", e.Error.Message, tt.inMessage)
			}
			if f.callCount() != before {
				t.Fatal("a body the handler refused reached the backend")
			}
		})
	}
	// Bodies the backend refuses: its invalid_request is answered as it is.
	for _, tt := range []struct {
		name, body, inMessage string
	}{
		{"ErrScheme", `{"url":"ftp://example.com/hook"}`, "http or https"},
		{"ErrRelative", `{"url":"/hook"}`, "absolute"},
		{"ErrNoURL", `{}`, "absolute"},
		{"ErrTransientType", `{"url":"https://example.com","events":["snapshot"]}`, `"snapshot"`},
		{"ErrUnknownType", `{"url":"https://example.com","events":["turn.done"]}`, `"turn.done"`},
		{"ErrNoSandbox", `{"url":"https://example.com","sandbox_id":"c_00000000000000000000000000"}`, "no sandbox"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := h.request(http.MethodPost, "/v1/webhooks", h.token, tt.body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
			if !strings.Contains(e.Error.Message, tt.inMessage) {
				t.Fatalf("message %q does not name the problem (%q)", e.Error.Message, tt.inMessage)
			}
		})
	}
	t.Run("ErrUnsupportedMediaType", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/webhooks", h.token, `{"url":"https://example.com"}`, "Content-Type", "text/plain").
			fails(t, http.StatusUnsupportedMediaType, sandbox.EUnsupportedMediaType)
	})
	t.Run("ErrPayloadTooLarge", func(t *testing.T) {
		body := `{"url":"https://example.com","description":"` + strings.Repeat("x", maxBodyBytes) + `"}`
		h.request(http.MethodPost, "/v1/webhooks", h.token, body).fails(t, http.StatusRequestEntityTooLarge, sandbox.EPayloadTooLarge)
	})
}

func TestWebhooksList(t *testing.T) {
	h, _ := webhookHarness(t)
	t.Run("OKEmptyIsArray", func(t *testing.T) {
		resp := h.request(http.MethodGet, "/v1/webhooks", h.token, nil)
		if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"data":[]`) || !strings.Contains(string(resp.body), `"object":"list"`) {
			t.Fatalf("empty list %d %s, want 200 {object: list, data: []}", resp.status, resp.body)
		}
	})
	t.Run("OK", func(t *testing.T) {
		a := h.createWebhook(`{"url":"https://a.example.com"}`)
		b := h.createWebhook(`{"url":"https://b.example.com"}`)
		resp := h.request(http.MethodGet, "/v1/webhooks", h.token, nil)
		var list struct {
			Object string            `json:"object"`
			Data   []sandbox.Webhook `json:"data"`
		}
		if err := json.Unmarshal(resp.body, &list); err != nil {
			t.Fatal(err)
		}
		if got, want := len(list.Data), 2; got != want {
			t.Fatalf("%d endpoints, want %d: %s", got, want, resp.body)
		}
		if list.Data[0].ID != a.ID || list.Data[1].ID != b.ID {
			t.Fatalf("list %s, want %s then %s", resp.body, a.ID, b.ID)
		}
		noSecret(t, resp, a.Secret)
		if strings.Contains(string(resp.body), b.Secret) {
			t.Fatalf("the list carries a secret: %s", resp.body)
		}
		if got := resp.header.Get("Cache-Control"); got == "no-store" {
			t.Fatal("a list without secrets is answered no-store")
		}
	})
}

func TestWebhooksGet(t *testing.T) {
	h, _ := webhookHarness(t)
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodGet, "/v1/webhooks/"+c.ID, h.token, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		noSecret(t, resp, c.Secret)
		var wh sandbox.Webhook
		if err := json.Unmarshal(resp.body, &wh); err != nil {
			t.Fatal(err)
		}
		if wh.ID != c.ID || wh.URL != c.URL || wh.State != sandbox.WebhookActive {
			t.Fatalf("answer %s, want endpoint %s", resp.body, c.ID)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/webhooks/"+noWebhook, h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestWebhooksUpdate(t *testing.T) {
	h, f := webhookHarness(t)
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	path := "/v1/webhooks/" + c.ID
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodPatch, path, h.token, `{"url":"https://example.com/v2","events":["approval.requested"],"description":"v2"}`)
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		noSecret(t, resp, c.Secret)
		var wh sandbox.Webhook
		if err := json.Unmarshal(resp.body, &wh); err != nil {
			t.Fatal(err)
		}
		if wh.URL != "https://example.com/v2" || wh.Description != "v2" || !slices.Equal(wh.Events, []sandbox.Type{sandbox.TypeApprovalRequested}) {
			t.Fatalf("answer %s, want the patched endpoint", resp.body)
		}
	})
	t.Run("OKDisableEnable", func(t *testing.T) {
		var wh sandbox.Webhook
		h.ok(http.MethodPatch, path, `{"enabled":false}`, http.StatusOK, &wh)
		if wh.Enabled || wh.State != sandbox.WebhookDisabled {
			t.Fatalf("enabled %v state %q after enabled:false", wh.Enabled, wh.State)
		}
		f.mu.Lock()
		f.endpoints[c.ID].DisabledReason = "event 7 of sandbox c_1 failed for 72h0m0s"
		f.mu.Unlock()
		h.ok(http.MethodPatch, path, `{"enabled":true}`, http.StatusOK, &wh)
		if !wh.Enabled || wh.State != sandbox.WebhookActive || wh.DisabledReason != "" {
			t.Fatalf("enabled %v state %q reason %q after enabled:true", wh.Enabled, wh.State, wh.DisabledReason)
		}
	})
	for _, tt := range []struct {
		name, body, inMessage string
	}{
		{"ErrBadJSON", `{"enabled":`, "not valid JSON"},
		{"ErrWrongType", `{"enabled":"yes"}`, `"enabled"`},
		{"ErrUnknownField", `{"secret":"whsec_mine"}`, `unknown field "secret"`},
		{"ErrURL", `{"url":"file:///etc/passwd"}`, "http or https"},
		{"ErrEventType", `{"events":["sandbox.status"]}`, `"sandbox.status"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := h.request(http.MethodPatch, path, h.token, tt.body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
			if !strings.Contains(e.Error.Message, tt.inMessage) {
				t.Fatalf("message %q does not name the problem (%q)", e.Error.Message, tt.inMessage)
			}
		})
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodPatch, "/v1/webhooks/"+noWebhook, h.token, `{"enabled":true}`).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestWebhooksDelete(t *testing.T) {
	h, _ := webhookHarness(t)
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodDelete, "/v1/webhooks/"+c.ID, h.token, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		noSecret(t, resp, c.Secret)
		var wh sandbox.Webhook
		if err := json.Unmarshal(resp.body, &wh); err != nil {
			t.Fatal(err)
		}
		if wh.ID != c.ID {
			t.Fatalf("answer %s, want the deleted endpoint %s", resp.body, c.ID)
		}
		h.request(http.MethodGet, "/v1/webhooks/"+c.ID, h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodDelete, "/v1/webhooks/"+c.ID, h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestWebhooksRotateSecret(t *testing.T) {
	h, _ := webhookHarness(t)
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodPost, "/v1/webhooks/"+c.ID+"/rotate-secret", h.token, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		if got, want := resp.header.Get("Cache-Control"), "no-store"; got != want {
			t.Fatalf("Cache-Control %q, want %q: the answer carries the secret", got, want)
		}
		var r sandbox.CreatedWebhook
		if err := json.Unmarshal(resp.body, &r); err != nil {
			t.Fatal(err)
		}
		if r.ID != c.ID || !strings.HasPrefix(r.Secret, "whsec_") || r.Secret == c.Secret {
			t.Fatalf("answer %s, want endpoint %s with a new secret", resp.body, c.ID)
		}
		noSecret(t, h.request(http.MethodGet, "/v1/webhooks/"+c.ID, h.token, nil), r.Secret)
	})
	t.Run("OKEmptyBody", func(t *testing.T) {
		h.ok(http.MethodPost, "/v1/webhooks/"+c.ID+"/rotate-secret", `{}`, http.StatusOK, nil)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/webhooks/"+noWebhook+"/rotate-secret", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestWebhooksDeliveries(t *testing.T) {
	h, f := webhookHarness(t)
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	path := "/v1/webhooks/" + c.ID + "/deliveries"
	t.Run("OKEmptyIsArray", func(t *testing.T) {
		resp := h.request(http.MethodGet, path, h.token, nil)
		if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"data":[]`) {
			t.Fatalf("no deliveries: %d %s, want 200 data []", resp.status, resp.body)
		}
	})
	older := f.failed(c.ID, "c_01jx4d8m2q7r0v5b3n6k9p1w2z", 7)
	newer := f.failed(c.ID, "c_01jx4d8m2q7r0v5b3n6k9p1w2z", 9)
	t.Run("OK", func(t *testing.T) {
		resp := h.request(http.MethodGet, path, h.token, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		var list struct {
			Object string                    `json:"object"`
			Data   []sandbox.WebhookDelivery `json:"data"`
		}
		if err := json.Unmarshal(resp.body, &list); err != nil {
			t.Fatal(err)
		}
		if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != newer.ID || list.Data[1].ID != older.ID {
			t.Fatalf("deliveries %s, want %s then %s", resp.body, newer.ID, older.ID)
		}
		// Event ids are decimal strings, as everywhere in the API.
		if !strings.Contains(string(resp.body), `"event_id":"9"`) {
			t.Fatalf("event_id is not a decimal string: %s", resp.body)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/webhooks/"+noWebhook+"/deliveries", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("OKRetry", func(t *testing.T) {
		var d sandbox.WebhookDelivery
		h.ok(http.MethodPost, path+"/"+older.ID+"/retry", nil, http.StatusOK, &d)
		if d.ID != older.ID || d.Attempt != older.Attempt+1 || d.StatusCode != http.StatusNoContent {
			t.Fatalf("retry answered %+v, want attempt %d of %s", d, older.Attempt+1, older.ID)
		}
	})
	t.Run("ErrRetryNoDelivery", func(t *testing.T) {
		h.request(http.MethodPost, path+"/"+noDelivery+"/retry", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("ErrRetryNoEndpoint", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/webhooks/"+noWebhook+"/deliveries/"+older.ID+"/retry", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

// webhookCalls are one call of each route of /v1/webhooks.
func webhookCalls(id, delivery string) []struct{ method, path, body string } {
	return []struct{ method, path, body string }{
		{http.MethodPost, "/v1/webhooks", `{"url":"https://example.com/hook"}`},
		{http.MethodGet, "/v1/webhooks", ""},
		{http.MethodGet, "/v1/webhooks/" + id, ""},
		{http.MethodPatch, "/v1/webhooks/" + id, `{"enabled":false}`},
		{http.MethodDelete, "/v1/webhooks/" + id, ""},
		{http.MethodPost, "/v1/webhooks/" + id + "/rotate-secret", ""},
		{http.MethodGet, "/v1/webhooks/" + id + "/deliveries", ""},
		{http.MethodPost, "/v1/webhooks/" + id + "/deliveries/" + delivery + "/retry", ""},
	}
}

// TestWebhooksAuth checks that every route takes the server token only:
// no token or a wrong one is 401, a stream token 403, and neither reaches
// the backend.
func TestWebhooksAuth(t *testing.T) {
	h, f := webhookHarness(t)
	sb := h.createSandbox()
	c := h.createWebhook(`{"url":"https://example.com/hook"}`)
	d := f.failed(c.ID, sb.ID, 3)
	calls := webhookCalls(c.ID, d.ID)
	if got, want := len(calls), len(h.srv.webhookRoutes()); got != want {
		t.Fatalf("%d calls for %d routes", got, want)
	}
	for _, tt := range []struct {
		name   string
		token  string
		status int
		typ    string
	}{
		{"ErrNoToken", "", http.StatusUnauthorized, sandbox.EUnauthorized},
		{"ErrWrongToken", "sk_wrong", http.StatusUnauthorized, sandbox.EUnauthorized},
		{"ErrStreamToken", sb.StreamToken, http.StatusForbidden, sandbox.EForbidden},
		// A stream token made for a sandbox named as the endpoint is.
		{"ErrStreamTokenOfID", StreamToken(testToken, c.ID), http.StatusForbidden, sandbox.EForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := f.callCount()
			for _, call := range calls {
				var body any
				if call.body != "" {
					body = call.body
				}
				resp := h.request(call.method, call.path, tt.token, body)
				if resp.status != tt.status {
					t.Errorf("%s %s: %d %s, want %d", call.method, call.path, resp.status, resp.body, tt.status)
					continue
				}
				resp.fails(t, tt.status, tt.typ)
				if tt.status == http.StatusUnauthorized && resp.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s: 401 without WWW-Authenticate", call.method, call.path)
				}
			}
			if f.callCount() != before {
				t.Fatalf("%d calls reached the backend without the server token", f.callCount()-before)
			}
		})
	}
}

// TestWebhooksBackendErrors checks how the handlers answer the backend's
// errors: a contract error with its status, anything else as a generic
// 500 that tells nothing of it.
func TestWebhooksBackendErrors(t *testing.T) {
	h, f := webhookHarness(t)
	for _, tt := range []struct {
		name   string
		err    error
		status int
		typ    string
	}{
		{"Unavailable", sandbox.Errorf(sandbox.EUnavailable, "the store is full"), http.StatusServiceUnavailable, sandbox.EUnavailable},
		{"Internal", errors.New("bolt: /var/lib/sparkles/data.db: corrupt page"), http.StatusInternalServerError, sandbox.EInternal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.fail = tt.err
			f.mu.Unlock()
			t.Cleanup(func() {
				f.mu.Lock()
				f.fail = nil
				f.mu.Unlock()
			})
			for _, call := range webhookCalls(noWebhook, noDelivery) {
				var body any
				if call.body != "" {
					body = call.body
				}
				resp := h.request(call.method, call.path, h.token, body)
				e := resp.fails(t, tt.status, tt.typ)
				if strings.Contains(e.Error.Message, "corrupt") {
					t.Fatalf("%s %s: an internal error's detail reached the client: %s", call.method, call.path, resp.body)
				}
			}
		})
	}
}

// TestWebhooksOff checks that a server without Config.Webhooks has no
// webhook routes: they answer 404 like any unknown path.
func TestWebhooksOff(t *testing.T) {
	h := newHarness(t, options{})
	for _, call := range webhookCalls(noWebhook, noDelivery) {
		var body any
		if call.body != "" {
			body = call.body
		}
		h.request(call.method, call.path, h.token, body).fails(t, http.StatusNotFound, sandbox.ENotFound)
	}
}

func TestWebhooksMethodNotAllowed(t *testing.T) {
	h, _ := webhookHarness(t)
	resp := h.request(http.MethodPut, "/v1/webhooks/"+noWebhook, h.token, `{}`)
	resp.fails(t, http.StatusMethodNotAllowed, sandbox.EInvalidRequest)
	if allow := resp.header.Get("Allow"); !strings.Contains(allow, http.MethodPatch) || !strings.Contains(allow, http.MethodDelete) {
		t.Fatalf("Allow %q, want GET, PATCH and DELETE", allow)
	}
}
