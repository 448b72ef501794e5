package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

const testToken = "sk_test_0123456789"

// harness is a real server on 127.0.0.1 over a coordinator and a bbolt
// file in a temporary directory.
type harness struct {
	t      testing.TB
	token  string
	store  *boltstore.Store
	coord  *coordinator.Coordinator
	be     *testBackend
	reads  *testStore // store as the server reads it, with hooks
	srv    *Server
	url    string
	client *http.Client
}

type options struct {
	keepalive    time.Duration
	writeTimeout time.Duration
	// sendBuffer, when set, is the kernel send buffer of every accepted
	// connection, so a client that stops reading stalls the server's writes
	// after a little data rather than after megabytes.
	sendBuffer int
	logger     *slog.Logger
	// bodyTimeout bounds the reading of request bodies.
	bodyTimeout time.Duration
	observer    Observer
	// coord changes the coordinator's config (a data dir, limits).
	coord func(*coordinator.Config)
	// webhooks, when set, serves /v1/webhooks.
	webhooks Webhooks
}

func newHarness(tb testing.TB, opt options) *harness {
	tb.Helper()
	st := bolttest.MustOpen(tb)
	cfg := coordinator.Config{Store: st}
	if opt.coord != nil {
		opt.coord(&cfg)
	}
	coord, err := coordinator.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	be, reads := &testBackend{Coordinator: coord, store: st}, &testStore{Store: st}
	srv := New(Config{Backend: be, Store: reads, Token: testToken, Keepalive: opt.keepalive, WriteTimeout: opt.writeTimeout, BodyTimeout: opt.bodyTimeout, Logger: opt.logger, Observer: opt.observer, Webhooks: opt.webhooks})
	ts := httptest.NewUnstartedServer(srv)
	if opt.sendBuffer > 0 {
		ts.Listener = sendBufferListener{ts.Listener, opt.sendBuffer}
	}
	ts.Start()
	tr := &http.Transport{}
	h := &harness{t: tb, token: testToken, store: st, coord: coord, be: be, reads: reads, srv: srv, url: ts.URL, client: &http.Client{Transport: tr}}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		// Streams first: httptest waits for every request to finish.
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		tr.CloseIdleConnections()
		ts.Close()
		coord.Close()
		if err := st.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return h
}

type sendBufferListener struct {
	net.Listener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetWriteBuffer(l.size); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// testBackend is the coordinator with stand-ins for the agent-driven calls
// (a coordinator without agents runs no turns).
type testBackend struct {
	*coordinator.Coordinator
	store *boltstore.Store

	mu        sync.Mutex
	lastInput string
}

func (b *testBackend) StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	if _, err := b.store.Sandbox(ctx, id); err != nil {
		return sandbox.Turn{}, err
	}
	b.mu.Lock()
	b.lastInput = input
	b.mu.Unlock()
	return sandbox.Turn{ID: sandbox.NewID(sandbox.PrefixTurn), Object: "turn", SandboxID: id,
		Status: sandbox.TurnQueued, Input: sandbox.TextInput(input), CreatedAt: time.Now().UTC()}, nil
}

func (b *testBackend) CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	t, err := b.Turn(ctx, id, turnID)
	if err != nil {
		return sandbox.Turn{}, err
	}
	t.Status = sandbox.TurnCanceled
	return t, nil
}

func (b *testBackend) Decide(ctx context.Context, id, approvalID string, d sandbox.Decision) (sandbox.Approval, error) {
	a, err := b.store.Approval(ctx, id, approvalID)
	if err != nil {
		return sandbox.Approval{}, err
	}
	decision := sandbox.DecisionApproved
	if d.Decision == "deny" {
		decision = sandbox.DecisionDenied
	}
	a.Status, a.Decision = sandbox.ApprovalDone, &decision
	if d.OptionID != "" {
		a.OptionID = &d.OptionID
	}
	return a, nil
}

// testStore is the store the server reads, with hooks on State, Read and
// Head so tests can hold a stream at a chosen point.
type testStore struct {
	*boltstore.Store

	mu        sync.Mutex
	onRead    func(id string, after uint64)
	afterHead func(id string)
	lagState  func(st *sandbox.State) // changes what State answers, as a node whose view of a shared store lags
}

func (s *testStore) State(ctx context.Context, id string) (sandbox.State, error) {
	st, err := s.Store.State(ctx, id)
	s.mu.Lock()
	lag := s.lagState
	s.mu.Unlock()
	if err == nil && lag != nil {
		lag(&st)
	}
	return st, err
}

func (s *testStore) setLagState(f func(st *sandbox.State)) {
	s.mu.Lock()
	s.lagState = f
	s.mu.Unlock()
}

func (s *testStore) Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error) {
	s.mu.Lock()
	hook := s.onRead
	s.mu.Unlock()
	if hook != nil {
		hook(id, after)
	}
	return s.Store.Read(ctx, id, after, limit)
}

func (s *testStore) Head(id string) (sandbox.Head, error) {
	h, err := s.Store.Head(id)
	s.mu.Lock()
	hook := s.afterHead
	s.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	return h, err
}

func (s *testStore) setAfterHead(f func(id string)) {
	s.mu.Lock()
	s.afterHead = f
	s.mu.Unlock()
}

func (s *testStore) setOnRead(f func(id string, after uint64)) {
	s.mu.Lock()
	s.onRead = f
	s.mu.Unlock()
}

// response is an answer of the API, checked to be JSON with a request id.
type response struct {
	status int
	header http.Header
	body   []byte
}

// request sends a request with the given bearer token ("" for none) and
// body (nil for none; a string is sent as application/json).
func (h *harness) request(method, path, token string, body any, header ...string) response {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.url+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusNoContent {
		if got, want := resp.Header.Get("Content-Type"), "application/json"; got != want {
			h.t.Fatalf("%s %s: Content-Type = %q, want %q (status %d, body %.200s)", method, path, got, want, resp.StatusCode, b)
		}
	}
	if resp.Header.Get("X-Request-Id") == "" {
		h.t.Fatalf("%s %s: no X-Request-Id", method, path)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// ok sends a request with the server token, checks the status and decodes
// the answer into out (when not nil).
func (h *harness) ok(method, path string, body any, want int, out any) {
	h.t.Helper()
	resp := h.request(method, path, h.token, body)
	if resp.status != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.status, want, resp.body)
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			h.t.Fatalf("%s %s: decode %s: %v", method, path, resp.body, err)
		}
	}
}

// apiError is the error answer of the API.
type apiError struct {
	Error struct {
		Type          string  `json:"type"`
		Message       string  `json:"message"`
		OldestEventID *string `json:"oldest_event_id"`
		PrunedThrough *string `json:"pruned_through"`
		LastEventID   *string `json:"last_event_id"`
	} `json:"error"`
}

// fails checks that resp is the error of the given status and type.
func (r response) fails(t testing.TB, status int, typ string) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %s: %v", r.body, err)
	}
	if r.status != status || e.Error.Type != typ {
		t.Fatalf("answer %d %q, want %d %q: %s", r.status, e.Error.Type, status, typ, r.body)
	}
	if e.Error.Message == "" {
		t.Fatalf("error %q without a message", typ)
	}
	return e
}

// created is the create answer.
type created struct {
	sandbox.Sandbox
	StreamToken string `json:"stream_token"`
}

func (h *harness) createSandbox() created {
	h.t.Helper()
	var c created
	h.ok(http.MethodPost, "/v1/sandboxes", nil, http.StatusCreated, &c)
	return c
}

// appendMessages appends n message.updated events to sandbox id, each with
// a text of size bytes, and returns their ids.
func (h *harness) appendMessages(id string, n, size int) []uint64 {
	h.t.Helper()
	ids := make([]uint64, 0, n)
	text := strings.Repeat("x", size)
	const batch = 1000
	for done := 0; done < n; {
		k := min(batch, n-done)
		evs := make([]*sandbox.Event, k)
		for i := range evs {
			evs[i] = &sandbox.Event{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{
				MessageID: "msg_1", PartID: fmt.Sprintf("part_%d", (done+i)%8), Index: (done + i) % 8,
				Kind: sandbox.PartText, Text: text,
			}}
		}
		if err := h.coord.AppendEvents(context.Background(), id, evs...); err != nil {
			h.t.Fatalf("append: %v", err)
		}
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
		done += k
	}
	return ids
}

// logIDs returns every retained id of a sandbox's log, read from the store.
func (h *harness) logIDs(id string) []uint64 {
	h.t.Helper()
	var ids []uint64
	var after uint64
	for {
		recs, err := h.store.Read(context.Background(), id, after, 1000)
		if err != nil {
			h.t.Fatalf("read log: %v", err)
		}
		if len(recs) == 0 {
			return ids
		}
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		after = recs[len(recs)-1].ID
	}
}

// prune removes every event of sandbox id up to through, as retention does.
func (h *harness) prune(id string, through uint64) {
	h.t.Helper()
	if _, err := h.store.Prune(context.Background(), id, through, 0); err != nil {
		h.t.Fatalf("prune: %v", err)
	}
}
