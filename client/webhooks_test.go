package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var testWebhook = map[string]any{
	"object": "webhook", "id": "wh_1", "url": "https://example.test/hook",
	"events": []string{"turn.completed"}, "enabled": true, "state": "active",
	"created_at": "2026-12-05T05:00:00Z", "stats": map[string]any{"delivered": 3, "failed": 1, "lag": 2},
}

var testDelivery = map[string]any{
	"object": "webhook_delivery", "id": "wh_1_c_1_7", "sandbox_id": "c_1", "event_id": "7",
	"type": "turn.completed", "attempt": 2, "at": "2026-12-05T05:00:00Z", "status_code": 500,
	"duration_ms": 12, "error": "the receiver answered 500 Internal Server Error",
}

// TestWebhookCalls: each call sends its method, path, token and body as
// the API says, and decodes the answer.
func TestWebhookCalls(t *testing.T) {
	created := map[string]any{"secret": "whsec_abc"}
	for k, v := range testWebhook {
		created[k] = v
	}
	enabled, url := false, "https://example.test/other"
	tests := []struct {
		name         string
		call         func(ctx context.Context, c *client.Client) (any, error)
		status       int
		answer       any
		method, path string
		body         string // "" when the request has none
		check        func(t *testing.T, got any)
	}{
		{
			name: "CreateWebhook",
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.CreateWebhook(ctx, sandbox.WebhookParams{URL: "https://example.test/hook", Events: []sandbox.Type{sandbox.TypeTurnCompleted}, SandboxID: "c_1", Description: "ci"})
			},
			status: http.StatusCreated, answer: created,
			method: "POST", path: "/v1/webhooks",
			body: `{"url":"https://example.test/hook","events":["turn.completed"],"sandbox_id":"c_1","description":"ci"}`,
			check: func(t *testing.T, got any) {
				wh := got.(sandbox.CreatedWebhook)
				if wh.ID != "wh_1" || wh.Secret != "whsec_abc" || wh.Stats.Delivered != 3 {
					t.Errorf("created %+v", wh)
				}
			},
		},
		{
			name:   "ListWebhooks",
			call:   func(ctx context.Context, c *client.Client) (any, error) { return c.ListWebhooks(ctx) },
			status: http.StatusOK, answer: map[string]any{"object": "list", "data": []any{testWebhook}},
			method: "GET", path: "/v1/webhooks",
			check: func(t *testing.T, got any) {
				if l := got.([]sandbox.Webhook); len(l) != 1 || l[0].ID != "wh_1" || l[0].State != sandbox.WebhookActive {
					t.Errorf("list %+v", l)
				}
			},
		},
		{
			name:   "GetWebhook",
			call:   func(ctx context.Context, c *client.Client) (any, error) { return c.GetWebhook(ctx, "wh_1") },
			status: http.StatusOK, answer: testWebhook,
			method: "GET", path: "/v1/webhooks/wh_1",
			check: func(t *testing.T, got any) {
				if wh := got.(sandbox.Webhook); wh.URL != "https://example.test/hook" || wh.Stats.Lag != 2 {
					t.Errorf("got %+v", wh)
				}
			},
		},
		{
			name: "UpdateWebhook",
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.UpdateWebhook(ctx, "wh_1", sandbox.WebhookPatch{URL: &url, Enabled: &enabled})
			},
			status: http.StatusOK, answer: testWebhook,
			method: "PATCH", path: "/v1/webhooks/wh_1",
			body: `{"url":"https://example.test/other","enabled":false}`,
		},
		{
			name:   "DeleteWebhook",
			call:   func(ctx context.Context, c *client.Client) (any, error) { return c.DeleteWebhook(ctx, "wh_1") },
			status: http.StatusOK, answer: testWebhook,
			method: "DELETE", path: "/v1/webhooks/wh_1",
		},
		{
			name:   "RotateWebhookSecret",
			call:   func(ctx context.Context, c *client.Client) (any, error) { return c.RotateWebhookSecret(ctx, "wh_1") },
			status: http.StatusOK, answer: created,
			method: "POST", path: "/v1/webhooks/wh_1/rotate-secret",
			check: func(t *testing.T, got any) {
				if wh := got.(sandbox.CreatedWebhook); wh.Secret != "whsec_abc" {
					t.Errorf("rotated %+v", wh)
				}
			},
		},
		{
			name:   "WebhookDeliveries",
			call:   func(ctx context.Context, c *client.Client) (any, error) { return c.WebhookDeliveries(ctx, "wh_1") },
			status: http.StatusOK, answer: map[string]any{"object": "list", "data": []any{testDelivery}},
			method: "GET", path: "/v1/webhooks/wh_1/deliveries",
			check: func(t *testing.T, got any) {
				if l := got.([]sandbox.WebhookDelivery); len(l) != 1 || l[0].EventID != 7 || l[0].Attempt != 2 || l[0].StatusCode != 500 {
					t.Errorf("deliveries %+v", l)
				}
			},
		},
		{
			name: "RetryWebhookDelivery",
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.RetryWebhookDelivery(ctx, "wh_1", "wh_1_c_1_7")
			},
			status: http.StatusOK, answer: testDelivery,
			method: "POST", path: "/v1/webhooks/wh_1/deliveries/wh_1_c_1_7/retry",
			check: func(t *testing.T, got any) {
				if d := got.(sandbox.WebhookDelivery); d.ID != "wh_1_c_1_7" {
					t.Errorf("retried %+v", d)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { answerJSON(w, tt.status, tt.answer) })
			got, err := tt.call(context.Background(), f.c)
			if err != nil {
				t.Fatal(err)
			}
			r := f.last(t)
			if r.Method != tt.method || r.Path != tt.path {
				t.Errorf("request %s %s, want %s %s", r.Method, r.Path, tt.method, tt.path)
			}
			if got, want := r.Header.Get("Authorization"), "Bearer tok"; got != want {
				t.Errorf("Authorization %q, want %q", got, want)
			}
			if tt.body == "" {
				if r.Body != "" {
					t.Errorf("body %q, want none", r.Body)
				}
			} else if !sameJSON(t, r.Body, tt.body) {
				t.Errorf("body %s, want %s", r.Body, tt.body)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// TestWebhookErrors: the API's errors come back as *Error of their type.
func TestWebhookErrors(t *testing.T) {
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerError(w, http.StatusNotFound, "not_found", "webhook wh_x not found")
		})
		_, err := f.c.GetWebhook(context.Background(), "wh_x")
		if !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("err %v, want not_found", err)
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			answerError(w, http.StatusBadRequest, "invalid_request", "url: scheme must be http or https")
		})
		_, err := f.c.CreateWebhook(context.Background(), sandbox.WebhookParams{URL: "ftp://x"})
		if !errors.Is(err, client.ErrInvalidRequest) {
			t.Fatalf("err %v, want invalid_request", err)
		}
	})
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}
