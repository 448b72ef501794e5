package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The fuzz targets of this file POST arbitrary bytes as the JSON body of
// each API request that takes one, through the real handler and the real
// coordinator. Whatever the body, the answer is the success of docs/api.md or
// one of its error shapes: never a 500, never a panic.

// errorTypes are the error types of docs/errors.md.
var errorTypes = map[string]bool{
	sandbox.EInvalidRequest: true, sandbox.EInvalidCursor: true, sandbox.EUnauthorized: true,
	sandbox.EForbidden: true, sandbox.ENotFound: true, sandbox.EConflict: true,
	sandbox.ETurnInProgress: true, sandbox.EApprovalResolved: true, sandbox.ECursorPruned: true,
	sandbox.ECursorStale: true, sandbox.EPayloadTooLarge: true, sandbox.EUnsupportedMediaType: true,
}

// fuzzRig is a server over a coordinator of its own, answered in memory.
type fuzzRig struct {
	srv        *Server
	sandboxID  string
	approvalID string
}

// newFuzzRig starts a coordinator on a store in a temporary directory. With
// agents, its one sandbox runs the demo agent in-process and has an
// approval pending; without, sandboxes are bare logs and creating one costs
// a single store write.
func newFuzzRig(f *testing.F, agents bool) *fuzzRig {
	f.Helper()
	dir := f.TempDir()
	st := bolttest.MustOpenAt(f, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	cfg := coordinator.Config{Store: st, DataDir: dir, FlushInterval: 5 * time.Millisecond}
	if agents {
		cfg.Builtins = map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo}
		// A turn the fuzzer starts must not hold the sandbox for long.
		cfg.TurnTimeout, cfg.ApprovalTimeout = 2*time.Second, time.Minute
	}
	coord, err := coordinator.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	r := &fuzzRig{srv: New(Config{Backend: coord, Store: st, Token: testToken})}
	f.Cleanup(func() {
		r.srv.Shutdown(context.Background())
		coord.Close()
		st.Close()
	})
	if !agents {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := coord.CreateSandbox(ctx, sandbox.CreateParams{})
	if err != nil {
		f.Fatal(err)
	}
	r.sandboxID = sb.ID
	if _, err := coord.StartTurn(ctx, sb.ID, "please write fuzz.txt"); err != nil {
		f.Fatal(err)
	}
	for r.approvalID == "" {
		wake := st.Wait(sb.ID)
		state, err := st.State(ctx, sb.ID)
		if err != nil {
			f.Fatal(err)
		}
		if len(state.Approvals) > 0 {
			r.approvalID = state.Approvals[0].ApprovalID
			break
		}
		select {
		case <-wake:
		case <-ctx.Done():
			f.Fatal("the demo agent asked for no approval")
		}
	}
	return r
}

// post sends body with a JSON content type and checks the answer's shape:
// success with the given status and object, or an error of docs/errors.md.
func (r *fuzzRig) post(t *testing.T, path string, body []byte, okStatus int, object string) {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	r.srv.ServeHTTP(w, req)
	checkShape(t, w, okStatus, object, body)
}

func checkShape(t *testing.T, w *httptest.ResponseRecorder, okStatus int, object string, body []byte) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
	}
	if got, want := w.Header().Get("Content-Type"), "application/json"; got != want {
		t.Fatalf("body %q: Content-Type %q, want %q", body, got, want)
	}
	if w.Code == okStatus {
		var ok struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &ok); err != nil || ok.Object != object || ok.ID == "" {
			t.Fatalf("body %q: success %d answered %s (%v)", body, w.Code, w.Body, err)
		}
		return
	}
	var e struct {
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	if err := dec.Decode(&e); err != nil || e.Error == nil {
		t.Fatalf("body %q: status %d answered %s, not an error object (%v)", body, w.Code, w.Body, err)
	}
	if !errorTypes[e.Error.Type] || sandbox.HTTPStatus(e.Error.Type) != w.Code || strings.TrimSpace(e.Error.Message) == "" {
		t.Fatalf("body %q: status %d with error %+v", body, w.Code, *e.Error)
	}
}

// bodySeeds are shapes every body target starts from, beside its own.
var bodySeeds = []string{
	``, ` `, `{}`, `null`, `[]`, `"x"`, `1`, `{`, `}`, `{"a":1}`, `{} {}`, `{}x`,
	`{"input":1e999}`, "{\"input\":\"\xff\xfe\"}", `{"input":"\u0000"}`, `{"decision":"approve","decision":"deny"}`,
	`{"env":{"A":"1"},"env":null}`, strings.Repeat(`[`, 10000), `{"x":` + strings.Repeat(`{"x":`, 5000),
	"\xef\xbb\xbf{}",
}

func FuzzCreateSandboxBody(f *testing.F) {
	for _, s := range append(bodySeeds,
		`{"agent":"demo"}`, `{"agent":""}`, `{"agent":null}`, `{"agent":["demo"]}`,
		`{"env":{"PATH":"/tmp","A":"b"}}`, `{"env":{"":"x"}}`, `{"env":{"A":1}}`, `{"env":[]}`,
		`{"secrets":{"API_KEY":"sk-canary-0123456789abcdef"}}`, `{"secrets":{"K":"`+strings.Repeat("v", 17<<10)+`"}}`,
		`{"metadata":{"team":"blue","run":"42"}}`, `{"metadata":{"k":null}}`,
		`{"env":{"A":"1"},"secrets":{"B":"2"},"metadata":{"c":"3"}}`, `{"status":"ready"}`, `{"id":"c_mine"}`,
	) {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f, false)
	f.Fuzz(func(t *testing.T, body []byte) {
		r.post(t, "/v1/sandboxes", body, http.StatusCreated, "sandbox")
	})
}

func FuzzTurnBody(f *testing.F) {
	for _, s := range append(bodySeeds,
		`{"input":"hello"}`, `{"input":""}`, `{"input":"   "}`, `{"input":null}`, `{"input":["hello"]}`,
		`{"input":{"type":"text","text":"hi"}}`, `{"input":"read ../../../etc/passwd"}`, `{"input":"write /etc/x.txt"}`,
		`{"input":"hello","model":"x"}`, `{"Input":"hello"}`, `{"input":"`+strings.Repeat("word ", 1000)+`"}`,
	) {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f, true)
	f.Fuzz(func(t *testing.T, body []byte) {
		r.post(t, "/v1/sandboxes/"+r.sandboxID+"/turns", body, http.StatusAccepted, "turn")
	})
}

func FuzzDecisionBody(f *testing.F) {
	for _, s := range append(bodySeeds,
		`{"decision":"approve"}`, `{"decision":"deny"}`, `{"decision":"maybe"}`, `{"decision":""}`,
		`{"decision":"APPROVE"}`, `{"decision":true}`, `{"option_id":"opt_1"}`, `{"option_id":"opt_99"}`,
		`{"option_id":""}`, `{"decision":"approve","option_id":"opt_1"}`, `{"decision":"approve","reason":"x"}`,
	) {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f, true)
	f.Fuzz(func(t *testing.T, body []byte) {
		r.post(t, "/v1/sandboxes/"+r.sandboxID+"/approvals/"+r.approvalID, body, http.StatusOK, "approval")
		r.post(t, "/v1/sandboxes/"+r.sandboxID+"/approvals/appr_unknown", body, http.StatusOK, "approval")
	})
}
