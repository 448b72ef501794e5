package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// fakeWebhooks serves the routes of /v1/webhooks in memory, as the API
// answers them (docs/webhooks.md), for the commands to run against.
type fakeWebhooks struct {
	URL string

	mu           sync.Mutex
	hooks        map[string]*sandbox.CreatedWebhook
	deliveries   map[string][]sandbox.WebhookDelivery
	n            int
	allowPrivate bool
	badSecret    bool // answer a creation with a secret that is not base64
	deleted      []string
	created      chan sandbox.CreatedWebhook // each creation, for listen's tests
}

func startFakeWebhooks(t *testing.T) *fakeWebhooks {
	t.Helper()
	f := &fakeWebhooks{
		hooks:        map[string]*sandbox.CreatedWebhook{},
		deliveries:   map[string][]sandbox.WebhookDelivery{},
		allowPrivate: true,
		created:      make(chan sandbox.CreatedWebhook, 10),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/webhooks", f.create)
	mux.HandleFunc("GET /v1/webhooks", f.list)
	mux.HandleFunc("GET /v1/webhooks/{id}", f.onHook(func(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
		answer(w, http.StatusOK, wh.Webhook)
	}))
	mux.HandleFunc("PATCH /v1/webhooks/{id}", f.onHook(f.patch))
	mux.HandleFunc("DELETE /v1/webhooks/{id}", f.onHook(func(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
		delete(f.hooks, wh.ID)
		f.deleted = append(f.deleted, wh.ID)
		answer(w, http.StatusOK, wh.Webhook)
	}))
	mux.HandleFunc("POST /v1/webhooks/{id}/rotate-secret", f.onHook(func(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
		wh.Secret = newSecret()
		answer(w, http.StatusOK, wh)
	}))
	mux.HandleFunc("GET /v1/webhooks/{id}/deliveries", f.onHook(func(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
		answer(w, http.StatusOK, map[string]any{"object": "list", "data": append([]sandbox.WebhookDelivery{}, f.deliveries[wh.ID]...)})
	}))
	mux.HandleFunc("POST /v1/webhooks/{id}/deliveries/{delivery}/retry", f.onHook(func(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
		for _, d := range f.deliveries[wh.ID] {
			if d.ID == r.PathValue("delivery") {
				d.Attempt++
				d.StatusCode, d.Error, d.NextAttemptAt = 200, "", nil
				answer(w, http.StatusOK, d)
				return
			}
		}
		answerErr(w, http.StatusNotFound, sandbox.ENotFound, "delivery "+r.PathValue("delivery")+" not found")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+sparklestest.DefaultToken {
			answerErr(w, http.StatusUnauthorized, sandbox.EUnauthorized, "missing or invalid token")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeWebhooks) create(w http.ResponseWriter, r *http.Request) {
	var p sandbox.WebhookParams
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		answerErr(w, http.StatusBadRequest, sandbox.EInvalidRequest, "body: "+err.Error())
		return
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		answerErr(w, http.StatusBadRequest, sandbox.EInvalidRequest, "url must be an absolute http or https URL")
		return
	}
	if ip := net.ParseIP(u.Hostname()); !f.allowPrivate && ip != nil && (ip.IsLoopback() || ip.IsPrivate()) {
		answerErr(w, http.StatusBadRequest, sandbox.EInvalidRequest, "url: "+u.Hostname()+" is a loopback or private address, which this server does not deliver to")
		return
	}
	if len(p.Events) == 0 {
		p.Events = sandbox.DefaultWebhookEvents
	}
	f.n++
	wh := &sandbox.CreatedWebhook{Webhook: sandbox.Webhook{
		Object: "webhook", ID: fmt.Sprintf("wh_%d", f.n), URL: p.URL, Events: p.Events, SandboxID: p.SandboxID,
		Description: p.Description, Enabled: true, State: sandbox.WebhookActive, CreatedAt: time.Now(),
	}, Secret: newSecret()}
	if f.badSecret {
		wh.Secret = "whsec_not base64!"
	}
	f.hooks[wh.ID] = wh
	f.created <- *wh
	w.Header().Set("Cache-Control", "no-store")
	answer(w, http.StatusCreated, wh)
}

func (f *fakeWebhooks) list(w http.ResponseWriter, r *http.Request) {
	list := []sandbox.Webhook{}
	for _, wh := range f.hooks {
		list = append(list, wh.Webhook)
	}
	slices.SortFunc(list, func(a, b sandbox.Webhook) int { return strings.Compare(a.ID, b.ID) })
	answer(w, http.StatusOK, map[string]any{"object": "list", "data": list})
}

func (f *fakeWebhooks) patch(w http.ResponseWriter, r *http.Request, wh *sandbox.CreatedWebhook) {
	var p sandbox.WebhookPatch
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		answerErr(w, http.StatusBadRequest, sandbox.EInvalidRequest, "body: "+err.Error())
		return
	}
	if p.URL != nil {
		wh.URL = *p.URL
	}
	if p.Events != nil {
		wh.Events = p.Events
	}
	if p.Description != nil {
		wh.Description = *p.Description
	}
	if p.Enabled != nil {
		wh.Enabled, wh.State, wh.DisabledReason = *p.Enabled, sandbox.WebhookActive, ""
		if !wh.Enabled {
			wh.State = sandbox.WebhookDisabled
		}
	}
	answer(w, http.StatusOK, wh.Webhook)
}

func (f *fakeWebhooks) onHook(h func(http.ResponseWriter, *http.Request, *sandbox.CreatedWebhook)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wh := f.hooks[r.PathValue("id")]
		if wh == nil {
			answerErr(w, http.StatusNotFound, sandbox.ENotFound, "webhook "+r.PathValue("id")+" not found")
			return
		}
		h(w, r, wh)
	}
}

func (f *fakeWebhooks) hook(id string) (sandbox.CreatedWebhook, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wh, ok := f.hooks[id]
	if !ok {
		return sandbox.CreatedWebhook{}, false
	}
	return *wh, true
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func answerErr(w http.ResponseWriter, status int, typ, msg string) {
	answer(w, status, map[string]any{"error": map[string]string{"type": typ, "message": msg}})
}

func newSecret() string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(rand.Text()[:24]))
}

// runWebhooks runs `sparkles webhooks ARGS…` against the server at url.
func runWebhooks(ctx context.Context, url string, stdout, stderr io.Writer, args ...string) error {
	app := newApp()
	app.Writer, app.ErrWriter, app.Reader = stdout, stderr, strings.NewReader("")
	argv := []string{"sparkles", "webhooks", args[0], "--url", url, "--token", sparklestest.DefaultToken}
	return app.RunContext(ctx, append(argv, args[1:]...))
}

func mustWebhooks(t *testing.T, url string, args ...string) cliRun {
	t.Helper()
	r, err := tryWebhooks(t, url, args...)
	if err != nil {
		t.Fatalf("sparkles webhooks %s: %v\nstderr: %s", strings.Join(args, " "), err, r.err)
	}
	return r
}

func tryWebhooks(t *testing.T, url string, args ...string) (cliRun, error) {
	t.Helper()
	var out, errw bytes.Buffer
	err := runWebhooks(testCtx(t), url, &out, &errw, args...)
	return cliRun{out.String(), errw.String()}, err
}

// TestWebhooksCommands: create prints the secret once with its warning,
// list, get, update, deliveries, retry, rotate and delete do what they say
// through the API, and errors are one line that says what to do.
func TestWebhooksCommands(t *testing.T) {
	f := startFakeWebhooks(t)

	r := mustWebhooks(t, f.URL, "create", "https://example.test/hook", "--event", "turn.completed", "--event", "approval.requested", "--sandbox", "c_1", "--description", "chat bot")
	wh, ok := f.hook("wh_1")
	if !ok || wh.URL != "https://example.test/hook" || wh.SandboxID != "c_1" || wh.Description != "chat bot" ||
		!slices.Equal(wh.Events, []sandbox.Type{sandbox.TypeTurnCompleted, sandbox.TypeApprovalRequested}) {
		t.Fatalf("created %+v", wh)
	}
	if field(r.out, "secret") != wh.Secret || !strings.Contains(r.out, "not shown again") {
		t.Fatalf("create printed no secret or no warning:\n%s", r.out)
	}

	r = mustWebhooks(t, f.URL, "create", "https://example.test/other", "--json")
	var created sandbox.CreatedWebhook
	if err := json.Unmarshal([]byte(r.out), &created); err != nil || created.ID != "wh_2" || !strings.HasPrefix(created.Secret, "whsec_") {
		t.Fatalf("create --json: %v\n%s", err, r.out)
	}
	if !strings.Contains(r.err, "not shown again") {
		t.Fatalf("create --json: no warning on stderr: %q", r.err)
	}
	if got, _ := f.hook("wh_2"); !slices.Equal(got.Events, sandbox.DefaultWebhookEvents) {
		t.Fatalf("events without --event = %v", got.Events)
	}

	f.mu.Lock()
	f.hooks["wh_1"].Stats = sandbox.WebhookStats{Delivered: 5, Failed: 2, Lag: 3}
	f.mu.Unlock()
	r = mustWebhooks(t, f.URL, "list")
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("list:\n%s", r.out)
	}
	for _, col := range []string{"STATE", "URL", "EVENTS", "DELIVERED/FAILED", "LAG"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("list header %q lacks %s", lines[0], col)
		}
	}
	if got := columns(lines[1]); !slices.Equal(got, []string{"wh_1", "active", "https://example.test/hook", "turn.completed,approval.requested", "5/2", "3"}) {
		t.Errorf("list row %q", lines[1])
	}

	r = mustWebhooks(t, f.URL, "update", "wh_1", "--disable", "--endpoint", "https://example.test/new", "--description", "")
	if wh, _ := f.hook("wh_1"); wh.Enabled || wh.URL != "https://example.test/new" || wh.Description != "" || len(wh.Events) != 2 {
		t.Fatalf("after update --disable --endpoint --description '': %+v", wh)
	}
	if field(r.out, "state") != "disabled" {
		t.Fatalf("update printed:\n%s", r.out)
	}
	mustWebhooks(t, f.URL, "update", "wh_1", "--enable", "--event", "sandbox.error")
	if wh, _ := f.hook("wh_1"); !wh.Enabled || !slices.Equal(wh.Events, []sandbox.Type{sandbox.TypeSandboxError}) {
		t.Fatalf("after update --enable --event: %+v", wh)
	}

	r = mustWebhooks(t, f.URL, "get", "wh_1")
	for k, want := range map[string]string{"id": "wh_1", "url": "https://example.test/new", "events": "sandbox.error", "sandbox": "c_1", "lag": "3 events", "delivered": "5", "failed": "2"} {
		if got := field(r.out, k); got != want {
			t.Errorf("get: %s %q, want %q:\n%s", k, got, want, r.out)
		}
	}
	if strings.Contains(r.out, wh.Secret) {
		t.Errorf("get shows the secret:\n%s", r.out)
	}

	next := time.Now().Add(time.Minute)
	f.mu.Lock()
	f.deliveries["wh_1"] = []sandbox.WebhookDelivery{
		{Object: "webhook_delivery", ID: "wh_1_c_1_9", SandboxID: "c_1", EventID: 9, Type: sandbox.TypeSandboxError, Attempt: 2, At: time.Now(),
			StatusCode: 500, DurationMS: 12, Error: "the receiver answered 500\tInternal\nServer Error", NextAttemptAt: &next},
		{Object: "webhook_delivery", ID: "wh_1_c_1_8", SandboxID: "c_1", EventID: 8, Type: sandbox.TypeSandboxError, Attempt: 1, At: time.Now(), DurationMS: 3, Error: "dial tcp: connection refused"},
	}
	f.mu.Unlock()
	r = mustWebhooks(t, f.URL, "deliveries", "wh_1")
	lines = strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[0], "NEXT ATTEMPT") {
		t.Fatalf("deliveries:\n%s", r.out)
	}
	if got, want := columns(lines[1])[1:], []string{"wh_1_c_1_9", "sandbox.error", "2", "500", "12ms", "the receiver answered 500 Internal Server Error", formatTime(next)}; !slices.Equal(got, want) {
		t.Errorf("deliveries row %q, want %q", got, want)
	}
	if got, want := columns(lines[2])[1:], []string{"wh_1_c_1_8", "sandbox.error", "1", "-", "3ms", "dial tcp: connection refused", "-"}; !slices.Equal(got, want) {
		t.Errorf("deliveries row of an attempt without an answer %q, want %q", got, want)
	}

	r = mustWebhooks(t, f.URL, "retry", "wh_1", "wh_1_c_1_9")
	if got := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n"); len(got) != 2 || !slices.Equal(columns(got[1])[1:6], []string{"wh_1_c_1_9", "sandbox.error", "3", "200", "12ms"}) {
		t.Errorf("retry printed:\n%s", r.out)
	}

	r = mustWebhooks(t, f.URL, "rotate", "wh_1")
	rotated, _ := f.hook("wh_1")
	if rotated.Secret == wh.Secret || field(r.out, "secret") != rotated.Secret || !strings.Contains(r.out, "not shown again") {
		t.Fatalf("rotate printed:\n%s", r.out)
	}

	r = mustWebhooks(t, f.URL, "delete", "wh_1")
	if _, ok := f.hook("wh_1"); ok || r.out != "deleted wh_1\n" {
		t.Fatalf("delete printed %q; still there: %v", r.out, ok)
	}

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := tryWebhooks(t, f.URL, "get", "wh_missing")
		if err == nil || !strings.Contains(err.Error(), "webhook wh_missing not found") || !strings.Contains(err.Error(), "sparkles webhooks list") {
			t.Fatalf("get of a missing endpoint: %v", err)
		}
		_, err = tryWebhooks(t, f.URL, "retry", "wh_2", "wh_2_c_1_1")
		if err == nil || !strings.Contains(err.Error(), "sparkles webhooks deliveries ID") {
			t.Fatalf("retry of a missing delivery: %v", err)
		}
	})

	t.Run("ErrPrivate", func(t *testing.T) {
		f.mu.Lock()
		f.allowPrivate = false
		f.mu.Unlock()
		defer func() { f.mu.Lock(); f.allowPrivate = true; f.mu.Unlock() }()
		_, err := tryWebhooks(t, f.URL, "create", "http://127.0.0.1:9/hook")
		if err == nil || !strings.Contains(err.Error(), "--webhook-allow-private") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("create of a loopback URL: %v", err)
		}
	})

	t.Run("ErrUsage", func(t *testing.T) {
		for _, args := range [][]string{
			{"create"},
			{"get"},
			{"update", "wh_2"},
			{"update", "wh_2", "--enable", "--disable"},
			{"retry", "wh_2"},
			{"listen", "--forward", "127.0.0.1:3000"},
		} {
			_, err := tryWebhooks(t, f.URL, args...)
			if _, usage := err.(usageError); !usage {
				t.Errorf("sparkles webhooks %s: err %v, want a usage error (exit 64)", strings.Join(args, " "), err)
			}
		}
	})
}

// columns splits a row of a table, whose cells are apart by two spaces or
// more.
func columns(line string) []string {
	return regexp.MustCompile(`  +`).Split(strings.TrimSpace(line), -1)
}

// field is the value of key in a key-value table.
func field(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if c := columns(line); len(c) == 2 && c[0] == key {
			return c[1]
		}
	}
	return ""
}

// syncBuffer is a buffer that listen's handlers and the test share; each
// write wakes waitFor.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.written <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the buffer holds want, or done is closed.
func (s *syncBuffer) waitFor(t *testing.T, want string, done <-chan struct{}) {
	t.Helper()
	ctx := testCtx(t)
	for !strings.Contains(s.String(), want) {
		select {
		case <-s.written:
		case <-done:
			if !strings.Contains(s.String(), want) {
				t.Fatalf("the command ended without printing %q:\n%s", want, s.String())
			}
		case <-ctx.Done():
			t.Fatalf("no %q in:\n%s", want, s.String())
		}
	}
}

// listening is a `sparkles webhooks listen` running in the test.
type listening struct {
	wh       sandbox.CreatedWebhook
	out, err *syncBuffer
	cancel   context.CancelFunc
	done     chan struct{} // closed when the command returned runErr
	runErr   error
}

// startListen runs listen against the API at url until it is ready.
func startListen(t *testing.T, url string, args ...string) *listening {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	l := &listening{out: newSyncBuffer(), err: newSyncBuffer(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.runErr = runWebhooks(ctx, url, l.out, l.err, append([]string{"listen"}, args...)...)
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	l.err.waitFor(t, "Ctrl-C removes the endpoint.", l.done)
	return l
}

// startFakeListen is startListen against the fake, with the endpoint it
// registered.
func startFakeListen(t *testing.T, f *fakeWebhooks, args ...string) *listening {
	t.Helper()
	l := startListen(t, f.URL, args...)
	l.wh = <-f.created
	return l
}

// deliver posts body to the listener as the server would, signed with
// secret, and returns the answer.
func (l *listening) deliver(t *testing.T, secret, webhookID string, body []byte) (*http.Response, string) {
	t.Helper()
	signer, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := signer.Sign(webhookID, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, l.wh.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(standardwebhooks.HeaderWebhookID, webhookID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// stop ends the listen as a signal would and returns what it returned.
func (l *listening) stop(t *testing.T) error {
	t.Helper()
	l.cancel()
	<-l.done
	return l.runErr
}

const testDeliveryBody = `{"type":"turn.completed","id":"7","sandbox_id":"c_1","turn_id":"turn_1","ts":"2026-12-05T05:00:00Z","data":{"status":"succeeded"}}`

// TestWebhooksListen: listen registers a loopback endpoint, prints a
// verified delivery as one line, refuses a badly signed one with 401 and a
// warning, and removes its endpoint when its context ends.
func TestWebhooksListen(t *testing.T) {
	f := startFakeWebhooks(t)
	l := startFakeListen(t, f, "--event", "turn.completed", "--sandbox", "c_1")
	if u, err := url.Parse(l.wh.URL); err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		t.Fatalf("registered URL %q", l.wh.URL)
	}
	if !slices.Equal(l.wh.Events, []sandbox.Type{sandbox.TypeTurnCompleted}) || l.wh.SandboxID != "c_1" {
		t.Fatalf("registered %+v", l.wh.Webhook)
	}
	resp, _ := l.deliver(t, l.wh.Secret, "wh_1_c_1_7", []byte(testDeliveryBody))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("verified delivery answered %s", resp.Status)
	}
	want := formatTime(time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)) + "  turn.completed      c_1  event 7  turn_1\n"
	if got := l.out.String(); got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}

	resp, _ = l.deliver(t, newSecret(), "wh_1_c_1_8", []byte(testDeliveryBody))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("badly signed delivery answered %s", resp.Status)
	}
	if !strings.Contains(l.err.String(), "warning: refused a request") || l.out.String() != want {
		t.Fatalf("after a bad signature: stdout %q, stderr:\n%s", l.out.String(), l.err.String())
	}

	if err := l.stop(t); err != nil {
		t.Fatalf("listen ended with %v", err)
	}
	if _, ok := f.hook(l.wh.ID); ok {
		t.Fatalf("the endpoint %s is still registered", l.wh.ID)
	}
	// The secret was printed for a --forward target to verify with.
	if !strings.Contains(l.err.String(), l.wh.Secret) || !strings.Contains(l.err.String(), "removed the endpoint "+l.wh.ID) {
		t.Fatalf("stderr:\n%s", l.err.String())
	}
}

// TestWebhooksListenForward: --forward passes a verified delivery on with
// its body and signature headers and answers what the target answered;
// an unreachable target is 502. --json prints the body.
func TestWebhooksListenForward(t *testing.T) {
	type seen struct {
		body   string
		header http.Header
	}
	got := make(chan seen, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Header.Clone()}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "taken")
	}))
	defer target.Close()

	f := startFakeWebhooks(t)
	l := startFakeListen(t, f, "--forward", target.URL+"/hooks", "--json")
	resp, body := l.deliver(t, l.wh.Secret, "wh_1_c_1_7", []byte(testDeliveryBody))
	if resp.StatusCode != http.StatusAccepted || body != "taken" {
		t.Fatalf("forwarded delivery answered %s %q, want the target's 202 taken", resp.Status, body)
	}
	s := <-got
	if s.body != testDeliveryBody {
		t.Errorf("forwarded body %q", s.body)
	}
	// The target verifies with the same secret: the headers came along.
	v, _ := standardwebhooks.NewWebhook(l.wh.Secret)
	if err := v.Verify([]byte(s.body), s.header); err != nil || s.header.Get("webhook-id") != "wh_1_c_1_7" {
		t.Errorf("forwarded headers %v do not verify: %v", s.header, err)
	}
	if out := l.out.String(); out != testDeliveryBody+"\n" {
		t.Errorf("--json printed %q", out)
	}

	target.Close()
	resp, _ = l.deliver(t, l.wh.Secret, "wh_1_c_1_8", []byte(testDeliveryBody))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("delivery with the target down answered %s, want 502", resp.Status)
	}
	if !strings.Contains(l.err.String(), "could not forward") {
		t.Errorf("stderr:\n%s", l.err.String())
	}
	if err := l.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.hook(l.wh.ID); ok {
		t.Fatalf("the endpoint %s is still registered", l.wh.ID)
	}
}

// TestWebhooksListenPrivate: a server that refuses loopback URLs is named
// with the flag it needs, and nothing is left registered.
func TestWebhooksListenPrivate(t *testing.T) {
	f := startFakeWebhooks(t)
	f.allowPrivate = false
	out, errw := newSyncBuffer(), newSyncBuffer()
	err := runWebhooks(testCtx(t), f.URL, out, errw, "listen")
	if err == nil || !strings.Contains(err.Error(), "must run with --webhook-allow-private") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("listen against a server refusing loopback: %v", err)
	}
	if n := len(f.hooks); n != 0 {
		t.Fatalf("%d endpoints left", n)
	}
}

// TestWebhooksListenError: a listen that fails after registering still
// removes its endpoint.
func TestWebhooksListenError(t *testing.T) {
	f := startFakeWebhooks(t)
	f.badSecret = true
	out, errw := newSyncBuffer(), newSyncBuffer()
	err := runWebhooks(testCtx(t), f.URL, out, errw, "listen")
	if err == nil || !strings.Contains(err.Error(), "signing secret") {
		t.Fatalf("listen with a bad secret: %v", err)
	}
	if len(f.hooks) != 0 || len(f.deleted) != 1 {
		t.Fatalf("endpoints left %d, deleted %v", len(f.hooks), f.deleted)
	}
}

// TestWebhooksServe: against the real server, listen receives the
// deliveries of a turn, deliveries shows the attempt, and the endpoint is
// gone once listen ends.
func TestWebhooksServe(t *testing.T) {
	srv, id := startSandbox(t)
	l := startListen(t, srv.URL, "--sandbox", id, "--event", "turn.completed")
	list, err := srv.Client.ListWebhooks(testCtx(t))
	if err != nil || len(list) != 1 || list[0].SandboxID != id {
		t.Fatalf("endpoints %+v, %v", list, err)
	}
	wh := list[0]

	turnID, _ := runTurn(t, srv, id, "hello")
	l.out.waitFor(t, "turn.completed", l.done)
	line := l.out.String()
	if f := strings.Fields(line); len(f) != 7 || f[2] != "turn.completed" || f[3] != id || f[4] != "event" || f[6] != turnID {
		t.Fatalf("printed %q; want time, turn.completed, %s, event N, %s", line, id, turnID)
	}

	// The attempt is recorded once the receiver's answer is in: wait for
	// the endpoint's figures to say so.
	for {
		got, err := srv.Client.GetWebhook(testCtx(t), wh.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Stats.Delivered > 0 {
			break
		}
		select {
		case <-testCtx(t).Done():
			t.Fatalf("no delivery counted: %+v", got.Stats)
		case <-time.After(10 * time.Millisecond):
		}
	}
	r := mustWebhooks(t, srv.URL, "deliveries", wh.ID)
	rows := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(rows) != 2 || columns(rows[1])[2] != "turn.completed" || columns(rows[1])[4] != "204" {
		t.Fatalf("deliveries:\n%s", r.out)
	}

	if err := l.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.GetWebhook(testCtx(t), wh.ID); !client.IsType(err, sandbox.ENotFound) {
		t.Fatalf("after listen ended, the endpoint: %v", err)
	}
}
