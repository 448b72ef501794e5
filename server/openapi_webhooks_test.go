// Left out of the fuzz runs with openapi_test.go, for the validator it
// imports.

//go:build !sparkles_fuzz

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/apitest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// closedSpec loads doc with its answer schemas closed, as the conformance
// test at the root does: a field the document does not name fails.
func closedSpec(t *testing.T, doc []byte) *apitest.Spec {
	t.Helper()
	closed, err := apitest.Closed(doc)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := apitest.Load(closed)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// exchange sends a request to the harness's server and keeps it whole,
// for validation against the document. token "-" sends none; header
// holds name, value pairs.
func (h *harness) exchange(name string, judge apitest.Judgement, method, path, token string, body []byte, header ...string) *apitest.Exchange {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	switch token {
	case "":
		req.Header.Set("Authorization", "Bearer "+h.token)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ex := &apitest.Exchange{Name: name, Judge: judge, Method: method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	if ex.RBody, err = io.ReadAll(resp.Body); err != nil {
		h.t.Fatalf("%s: %v", name, err)
	}
	ex.Status, ex.RHeader = resp.StatusCode, resp.Header.Clone()
	return ex
}

// TestOpenAPIWebhooks drives every webhook route through the real handler
// stack over the fake backend and validates each answer against the
// document, its answer schemas closed; then it breaks the document's
// webhook schemas and checks that the answers fail.
func TestOpenAPIWebhooks(t *testing.T) {
	spec := closedSpec(t, openAPIDocument)
	h, f := webhookHarness(t)
	sb := h.createSandbox()
	f.mu.Lock()
	f.sandboxes[sb.ID] = true
	f.mu.Unlock()
	A, R, U := apitest.Accepted, apitest.Refused, apitest.Unjudged

	var exchanges []*apitest.Exchange
	want := func(status int, name string, judge apitest.Judgement, method, path, token string, body []byte, out any) {
		t.Helper()
		ex := h.exchange(name, judge, method, path, token, body)
		if ex.Status != status {
			t.Fatalf("%s: %s %s = %d %s, want %d", name, method, path, ex.Status, ex.RBody, status)
		}
		if err := spec.Check(ex); err != nil {
			t.Error(err)
		}
		if out != nil {
			if err := json.Unmarshal(ex.RBody, out); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		exchanges = append(exchanges, ex)
	}
	js := func(s string) []byte { return []byte(s) }

	var c sandbox.CreatedWebhook
	want(201, "create", A, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com/hook","description":"bot"}`), &c)
	want(201, "create for a sandbox", A, "POST", "/v1/webhooks", "", js(`{"url":"http://example.com/x","events":["plan.updated","tool.output"],"sandbox_id":"`+sb.ID+`"}`), nil)
	want(400, "create bad JSON", R, "POST", "/v1/webhooks", "", js(`{"url":`), nil)
	want(400, "create unknown field", R, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com","secret":"whsec_x"}`), nil)
	want(400, "create transient type", R, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com","events":["snapshot"]}`), nil)
	want(400, "create no url", R, "POST", "/v1/webhooks", "", js(`{}`), nil)
	want(400, "create bad scheme", A, "POST", "/v1/webhooks", "", js(`{"url":"ftp://example.com"}`), nil)
	want(400, "create no sandbox", A, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com","sandbox_id":"c_00000000000000000000000000"}`), nil)
	if ex := h.exchange("create text", R, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com"}`), "Content-Type", "text/plain"); ex.Status != http.StatusUnsupportedMediaType {
		t.Errorf("create text: %d %s, want 415", ex.Status, ex.RBody)
	} else if err := spec.Check(ex); err != nil {
		t.Error(err)
	}
	want(413, "create huge", U, "POST", "/v1/webhooks", "", js(`{"url":"https://example.com","description":"`+strings.Repeat("x", maxBodyBytes)+`"}`), nil)

	id := "/v1/webhooks/" + c.ID
	want(200, "list", A, "GET", "/v1/webhooks", "", nil, nil)
	want(200, "get", A, "GET", id, "", nil, nil)
	want(404, "get none", A, "GET", "/v1/webhooks/"+noWebhook, "", nil, nil)
	want(200, "patch", A, "PATCH", id, "", js(`{"events":["turn.completed","approval.requested"],"enabled":false}`), nil)
	want(200, "patch enable", A, "PATCH", id, "", js(`{"enabled":true}`), nil)
	want(400, "patch unknown field", R, "PATCH", id, "", js(`{"secret":"whsec_x"}`), nil)
	want(200, "rotate", A, "POST", id+"/rotate-secret", "", nil, nil)
	want(404, "rotate none", A, "POST", "/v1/webhooks/"+noWebhook+"/rotate-secret", "", nil, nil)
	want(200, "deliveries none", A, "GET", id+"/deliveries", "", nil, nil)
	d := f.failed(c.ID, sb.ID, 12)
	want(200, "deliveries", A, "GET", id+"/deliveries", "", nil, nil)
	want(200, "retry", A, "POST", id+"/deliveries/"+d.ID+"/retry", "", nil, nil)
	want(404, "retry none", A, "POST", id+"/deliveries/"+noDelivery+"/retry", "", nil, nil)
	f.mu.Lock()
	f.endpoints[c.ID].Stats = sandbox.WebhookStats{Delivered: 1, Failed: 1, Lag: 3, OldestUndeliveredAt: &fakeTime, LastAttempt: &d}
	f.endpoints[c.ID].State, f.endpoints[c.ID].DisabledReason = sandbox.WebhookFailing, ""
	f.mu.Unlock()
	want(200, "get with stats", A, "GET", id, "", nil, nil)
	want(401, "no token", R, "GET", "/v1/webhooks", "-", nil, nil)
	want(403, "stream token", U, "GET", id, sb.StreamToken, nil, nil)
	want(200, "delete", A, "DELETE", id, "", nil, nil)
	want(404, "delete again", A, "DELETE", id, "", nil, nil)

	// Every webhook operation of the document had a 2xx answer validated.
	ops := map[string]bool{}
	for _, op := range spec.Operations() {
		if strings.Contains(op, " /v1/webhooks") {
			ops[op] = false
		}
	}
	if len(ops) != len(h.srv.webhookRoutes()) {
		t.Fatalf("the document has %d webhook operations, the router %d routes", len(ops), len(h.srv.webhookRoutes()))
	}
	for _, ex := range exchanges {
		if ex.Status >= 300 {
			continue
		}
		for op := range ops {
			method, tmpl, _ := strings.Cut(op, " ")
			if ex.Method == method && matchPath(tmpl, pathOnly(ex.URL)) {
				ops[op] = true
			}
		}
	}
	for op, seen := range ops {
		if !seen {
			t.Errorf("no successful answer of %s was validated", op)
		}
	}

	// The checks bite: a document without the secret, or with a field of
	// the answers missing, fails the answers that carry them.
	for _, tt := range []struct {
		name   string
		mutate func(schemas map[string]any)
		answer string // the name of an exchange that must now fail
	}{
		{"NoSecret", func(s map[string]any) { delete(props(s, "CreatedWebhook"), "secret") }, "create"},
		{"NoStats", func(s map[string]any) { delete(props(s, "Webhook"), "stats") }, "get"},
		{"NoLastAttempt", func(s map[string]any) { delete(props(s, "WebhookStats"), "last_attempt") }, "get with stats"},
		{"NoResponseExcerpt", func(s map[string]any) { delete(props(s, "WebhookDelivery"), "response") }, "deliveries"},
		{"EventIDNumber", func(s map[string]any) { props(s, "WebhookDelivery")["event_id"] = map[string]any{"type": "integer"} }, "retry"},
	} {
		t.Run("Err"+tt.name, func(t *testing.T) {
			doc, err := apitest.Mutated(openAPIDocument, func(d map[string]any) {
				tt.mutate(apitest.Lookup(d, "components", "schemas").(map[string]any))
			})
			if err != nil {
				t.Fatal(err)
			}
			broken := closedSpec(t, doc)
			i := slices.IndexFunc(exchanges, func(ex *apitest.Exchange) bool { return ex.Name == tt.answer })
			if i < 0 {
				t.Fatalf("no exchange %q", tt.answer)
			}
			if err := broken.Check(exchanges[i]); err == nil {
				t.Fatalf("the broken document passed %q", tt.answer)
			}
		})
	}
}

// TestOpenAPIWebhookPayload validates delivery bodies, built from events
// as the log stores them, against WebhookPayload, and checks that its
// event types are the durable types.
func TestOpenAPIWebhookPayload(t *testing.T) {
	spec := closedSpec(t, openAPIDocument)
	h := newHarness(t, options{})
	sb := h.createSandbox()
	turn := sandbox.NewID(sandbox.PrefixTurn)
	evs := []*sandbox.Event{
		{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "hi"}},
		{Type: sandbox.TypeTurnCompleted, TurnID: turn, Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: "end_turn"}},
	}
	if err := h.coord.AppendEvents(context.Background(), sb.ID, evs...); err != nil {
		t.Fatal(err)
	}
	recs, err := h.store.Read(context.Background(), sb.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, rec := range recs {
		if rec.Type != sandbox.TypeMessageUpdated && rec.Type != sandbox.TypeTurnCompleted {
			continue
		}
		seen++
		body := payloadOf(t, rec)
		if err := spec.CheckSchema("WebhookPayload", body); err != nil {
			t.Error(err)
		}
	}
	if seen != 2 {
		t.Fatalf("validated %d payloads, want 2", seen)
	}
	t.Run("ErrEnvelopeFields", func(t *testing.T) {
		// The stream's envelope is not the payload: object and version
		// are not delivered.
		if err := spec.CheckSchema("WebhookPayload", recs[len(recs)-1].JSON); err == nil {
			t.Fatal("the stored envelope passed as a delivery body")
		}
	})
	t.Run("ErrNoTurnID", func(t *testing.T) {
		if err := spec.CheckSchema("WebhookPayload", []byte(`{"type":"turn.completed","id":"3","sandbox_id":"`+sb.ID+`","ts":"2025-06-01T12:00:00.120Z","data":{}}`)); err == nil {
			t.Fatal("a body without turn_id passed")
		}
	})
	t.Run("DurableTypes", func(t *testing.T) {
		enum, _ := apitest.Lookup(spec.Raw(), "components", "schemas", "WebhookEventType", "enum").([]any)
		var got []string
		for _, v := range enum {
			got = append(got, v.(string))
		}
		var want []string
		for _, typ := range sandbox.DurableTypes {
			want = append(want, string(typ))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("WebhookEventType %v, want the durable types %v", got, want)
		}
	})
}

// payloadOf is the delivery body of a stored event: its type, id,
// sandbox_id, turn_id, ts and data, each as stored.
func payloadOf(t *testing.T, rec sandbox.Record) []byte {
	t.Helper()
	var env map[string]json.RawMessage
	if err := json.Unmarshal(rec.JSON, &env); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, k := range []string{"type", "id", "sandbox_id", "turn_id", "ts", "data"} {
		v, ok := env[k]
		if !ok {
			t.Fatalf("stored event %s has no %q", rec.JSON, k)
		}
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func props(schemas map[string]any, name string) map[string]any {
	return apitest.Lookup(schemas, name, "properties").(map[string]any)
}

// pathOnly is the path of a URL.
func pathOnly(u string) string {
	_, rest, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
	p, _, _ := strings.Cut("/"+rest, "?")
	return p
}

// matchPath reports whether path fits the document's path template.
func matchPath(tmpl, path string) bool {
	a, b := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !strings.HasPrefix(a[i], "{") && a[i] != b[i] {
			return false
		}
	}
	return true
}
