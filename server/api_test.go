package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestHealthz(t *testing.T) {
	h := newHarness(t, options{})
	resp := h.request(http.MethodGet, "/healthz", "", nil)
	if got, want := resp.status, http.StatusOK; got != want {
		t.Fatalf("status %d, want %d", got, want)
	}
	if got, want := strings.TrimSpace(string(resp.body)), `{"status":"ok"}`; got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
}

func TestCreateSandbox(t *testing.T) {
	h := newHarness(t, options{})
	t.Run("OK", func(t *testing.T) {
		c := h.createSandbox()
		if !strings.HasPrefix(c.ID, sandbox.PrefixSandbox) {
			t.Fatalf("id %q", c.ID)
		}
		if got, want := c.Object, "sandbox"; got != want {
			t.Fatalf("object %q, want %q", got, want)
		}
		if got, want := c.StreamToken, StreamToken(testToken, c.ID); got != want {
			t.Fatalf("stream_token %q, want %q", got, want)
		}
	})
	t.Run("OKWithBody", func(t *testing.T) {
		var c created
		h.ok(http.MethodPost, "/v1/sandboxes", `{"metadata":{"app":"demo"},"secrets":{"K":"hush"}}`, http.StatusCreated, &c)
		if got, want := c.Metadata["app"], "demo"; got != want {
			t.Fatalf("metadata app = %q, want %q", got, want)
		}
		resp := h.request(http.MethodGet, "/v1/sandboxes/"+c.ID, h.token, nil)
		if strings.Contains(string(resp.body), "hush") {
			t.Fatalf("a secret value is in the answer: %s", resp.body)
		}
	})
	t.Run("OKContentTypeParameters", func(t *testing.T) {
		resp := h.request(http.MethodPost, "/v1/sandboxes", h.token, `{}`, "Content-Type", "application/json; charset=utf-8")
		if got, want := resp.status, http.StatusCreated; got != want {
			t.Fatalf("status %d, want %d: %s", got, want, resp.body)
		}
	})
	for _, tt := range []struct {
		name, body, inMessage string
	}{
		{"ErrBadJSON", `{"metadata":`, "not valid JSON"},
		{"ErrSyntax", `{"metadata" 1}`, "not valid JSON"},
		{"ErrUnknownField", `{"nope":1}`, `unknown field "nope"`},
		{"ErrTrailingData", `{} {}`, "after the JSON object"},
		{"ErrNotObject", `[1]`, "JSON object"},
		{"ErrWrongType", `{"metadata":"x"}`, `"metadata"`},
		// Environment variables a client may not set (issue of API access
		// turning into running any file on the host).
		{"ErrEnvKeyWithEquals", `{"env":{"A=B":"1"}}`, `"A=B" is not a variable name`},
		{"ErrEnvKeyDigit", `{"env":{"1A":"1"}}`, "not a variable name"},
		{"ErrEnvNUL", `{"env":{"A":"x\u0000y"}}`, "NUL"},
		{"ErrSecretNUL", `{"secrets":{"K":"\u0000"}}`, "NUL"},
		{"ErrMetadataNUL", `{"metadata":{"k\u0000":"v"}}`, "NUL"},
		{"ErrLDPreload", `{"env":{"LD_PRELOAD":"/tmp/x.so"}}`, "LD_PRELOAD is refused"},
		{"ErrLDLibraryPath", `{"env":{"LD_LIBRARY_PATH":"/tmp"}}`, "LD_LIBRARY_PATH is refused"},
		{"ErrDYLD", `{"env":{"DYLD_INSERT_LIBRARIES":"x"}}`, "refused"},
		{"ErrBashEnv", `{"env":{"BASH_ENV":"/tmp/x"}}`, "BASH_ENV is refused"},
		{"ErrEnv", `{"env":{"ENV":"/tmp/x"}}`, "ENV is refused"},
		{"ErrNodeOptions", `{"env":{"NODE_OPTIONS":"--require /tmp/x.js"}}`, "NODE_OPTIONS is refused"},
		{"ErrPythonStartup", `{"secrets":{"PYTHONSTARTUP":"/tmp/x.py"}}`, "PYTHONSTARTUP is refused"},
		{"ErrBashFunc", `{"env":{"BASH_FUNC_ls%%":"() { :; }"}}`, "not a variable name"},
		{"ErrLowerCaseHook", `{"env":{"ld_preload":"x"}}`, "refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := h.request(http.MethodPost, "/v1/sandboxes", h.token, tt.body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
			if !strings.Contains(e.Error.Message, tt.inMessage) {
				t.Fatalf("message %q does not name the problem (%q)", e.Error.Message, tt.inMessage)
			}
		})
	}
	t.Run("ErrPayloadTooLarge", func(t *testing.T) {
		body := `{"metadata":{"a":"` + strings.Repeat("x", maxBodyBytes) + `"}}`
		h.request(http.MethodPost, "/v1/sandboxes", h.token, body).fails(t, http.StatusRequestEntityTooLarge, sandbox.EPayloadTooLarge)
	})
	t.Run("ErrUnsupportedMediaType", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/sandboxes", h.token, `{}`, "Content-Type", "text/plain").
			fails(t, http.StatusUnsupportedMediaType, sandbox.EUnsupportedMediaType)
	})
	t.Run("ErrNoContentType", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/sandboxes", h.token, `{}`, "Content-Type", "").
			fails(t, http.StatusUnsupportedMediaType, sandbox.EUnsupportedMediaType)
	})
	t.Run("OKEnv", func(t *testing.T) {
		var c created
		h.ok(http.MethodPost, "/v1/sandboxes", `{"env":{"PATH":"/usr/bin","_X1":"a=b"}}`, http.StatusCreated, &c)
	})
	t.Run("ErrUnknownAgent", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/sandboxes", h.token, `{"agent":"nope"}`).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
	})
}

type sandboxPage struct {
	Object  string            `json:"object"`
	Data    []sandbox.Sandbox `json:"data"`
	HasMore bool              `json:"has_more"`
}

func TestListSandboxes(t *testing.T) {
	h := newHarness(t, options{})
	var ids []string
	for range 3 {
		ids = append(ids, h.createSandbox().ID)
	}
	t.Run("OK", func(t *testing.T) {
		var p sandboxPage
		h.ok(http.MethodGet, "/v1/sandboxes?limit=2", nil, http.StatusOK, &p)
		if got, want := p.Object, "list"; got != want {
			t.Fatalf("object %q, want %q", got, want)
		}
		if got, want := len(p.Data), 2; got != want {
			t.Fatalf("%d sandboxes, want %d", got, want)
		}
		if !p.HasMore {
			t.Fatal("has_more = false on a first page of 2 out of 3")
		}
		var rest sandboxPage
		h.ok(http.MethodGet, "/v1/sandboxes?limit=2&after="+p.Data[1].ID, nil, http.StatusOK, &rest)
		if got, want := len(rest.Data), 1; got != want {
			t.Fatalf("%d sandboxes on page 2, want %d", got, want)
		}
		if rest.HasMore {
			t.Fatal("has_more = true on the last page")
		}
		got := []string{p.Data[0].ID, p.Data[1].ID, rest.Data[0].ID}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("list order %v, want %v", got, ids)
			}
		}
	})
	t.Run("OKDefaultLimit", func(t *testing.T) {
		var p sandboxPage
		h.ok(http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, &p)
		if got, want := len(p.Data), 3; got != want {
			t.Fatalf("%d sandboxes, want %d", got, want)
		}
	})
	t.Run("OKEmptyIsArray", func(t *testing.T) {
		resp := h.request(http.MethodGet, "/v1/sandboxes?after="+ids[2], h.token, nil)
		if !strings.Contains(string(resp.body), `"data":[]`) {
			t.Fatalf("empty page %s, want data []", resp.body)
		}
	})
	for _, limit := range []string{"0", "101", "abc", "-1", ""} {
		t.Run("ErrLimit"+limit, func(t *testing.T) {
			h.request(http.MethodGet, "/v1/sandboxes?limit="+limit, h.token, nil).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
		})
	}
}

func TestGetSandbox(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 3, 10)
	t.Run("OK", func(t *testing.T) {
		var sb sandbox.Sandbox
		h.ok(http.MethodGet, "/v1/sandboxes/"+c.ID, nil, http.StatusOK, &sb)
		if got, want := sb.ID, c.ID; got != want {
			t.Fatalf("id %q, want %q", got, want)
		}
		if got, want := uint64(sb.LastEventID), ids[2]; got != want {
			t.Fatalf("last_event_id %d, want %d", got, want)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/sandboxes/c_nope", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestDeleteSandbox(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	t.Run("OK", func(t *testing.T) {
		var sb sandbox.Sandbox
		h.ok(http.MethodDelete, "/v1/sandboxes/"+c.ID, nil, http.StatusOK, &sb)
		if got, want := sb.Status, sandbox.StatusDeleted; got != want {
			t.Fatalf("status %q, want %q", got, want)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodDelete, "/v1/sandboxes/c_nope", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

// startTurnEvent appends a turn.started so the store knows the turn.
func (h *harness) startTurnEvent(sandboxID string) string {
	h.t.Helper()
	turnID := sandbox.NewID(sandbox.PrefixTurn)
	ev := &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turnID, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}}
	if err := h.coord.AppendEvents(context.Background(), sandboxID, ev); err != nil {
		h.t.Fatal(err)
	}
	return turnID
}

func TestTurns(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	turnID := h.startTurnEvent(c.ID)
	base := "/v1/sandboxes/" + c.ID + "/turns"

	t.Run("StartOK", func(t *testing.T) {
		var turn sandbox.Turn
		h.ok(http.MethodPost, base, `{"input":"list the files"}`, http.StatusAccepted, &turn)
		if got, want := turn.Object, "turn"; got != want {
			t.Fatalf("object %q, want %q", got, want)
		}
		h.be.mu.Lock()
		defer h.be.mu.Unlock()
		if got, want := h.be.lastInput, "list the files"; got != want {
			t.Fatalf("input given to the coordinator %q, want %q", got, want)
		}
	})
	for _, body := range []string{`{}`, `{"input":""}`, `{"input":"  "}`, ``} {
		t.Run("StartErrNoInput", func(t *testing.T) {
			h.request(http.MethodPost, base, h.token, body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
		})
	}
	t.Run("StartErrInputType", func(t *testing.T) {
		h.request(http.MethodPost, base, h.token, `{"input":["x"]}`).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
	})
	t.Run("StartErrNotFound", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/sandboxes/c_nope/turns", h.token, `{"input":"x"}`).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("GetOK", func(t *testing.T) {
		var turn sandbox.Turn
		h.ok(http.MethodGet, base+"/"+turnID, nil, http.StatusOK, &turn)
		if got, want := turn.ID, turnID; got != want {
			t.Fatalf("id %q, want %q", got, want)
		}
		if got, want := turn.Status, sandbox.TurnRunning; got != want {
			t.Fatalf("status %q, want %q", got, want)
		}
	})
	t.Run("GetErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, base+"/turn_nope", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
		h.request(http.MethodGet, "/v1/sandboxes/c_nope/turns/"+turnID, h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("CancelOK", func(t *testing.T) {
		var turn sandbox.Turn
		h.ok(http.MethodPost, base+"/"+turnID+"/cancel", nil, http.StatusAccepted, &turn)
		if got, want := turn.Status, sandbox.TurnCanceled; got != want {
			t.Fatalf("status %q, want %q", got, want)
		}
		h.ok(http.MethodPost, base+"/"+turnID+"/cancel", `{}`, http.StatusAccepted, nil)
	})
	t.Run("CancelErrUnknownField", func(t *testing.T) {
		h.request(http.MethodPost, base+"/"+turnID+"/cancel", h.token, `{"why":"x"}`).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
	})
	t.Run("CancelErrNotFound", func(t *testing.T) {
		h.request(http.MethodPost, base+"/turn_nope/cancel", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestApprovals(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	turnID := h.startTurnEvent(c.ID)
	apprID := sandbox.NewID(sandbox.PrefixApproval)
	ev := &sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: turnID, Data: &sandbox.ApprovalRequested{
		ApprovalID: apprID, ToolCallID: "tool_1", Title: "write file", Kind: sandbox.ToolKindEdit,
		Options: []sandbox.Option{{OptionID: "opt_1", Kind: sandbox.OptionAllowOnce, Label: "Allow"}},
	}}
	if err := h.coord.AppendEvents(context.Background(), c.ID, ev); err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + c.ID + "/approvals/" + apprID

	t.Run("OKDecision", func(t *testing.T) {
		var a sandbox.Approval
		h.ok(http.MethodPost, path, `{"decision":"deny"}`, http.StatusOK, &a)
		if a.Decision == nil || *a.Decision != sandbox.DecisionDenied {
			t.Fatalf("decision %v, want %q", a.Decision, sandbox.DecisionDenied)
		}
	})
	t.Run("OKOption", func(t *testing.T) {
		var a sandbox.Approval
		h.ok(http.MethodPost, path, `{"option_id":"opt_1"}`, http.StatusOK, &a)
		if a.OptionID == nil || *a.OptionID != "opt_1" {
			t.Fatalf("option_id %v, want opt_1", a.OptionID)
		}
	})
	for name, body := range map[string]string{
		"ErrNeither":       `{}`,
		"ErrEmpty":         ``,
		"ErrBoth":          `{"decision":"approve","option_id":"opt_1"}`,
		"ErrBadDecision":   `{"decision":"maybe"}`,
		"ErrUnknownField":  `{"decision":"approve","reason":"x"}`,
		"ErrDecisionIsInt": `{"decision":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			h.request(http.MethodPost, path, h.token, body).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
		})
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodPost, "/v1/sandboxes/"+c.ID+"/approvals/appr_nope", h.token, `{"decision":"approve"}`).
			fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func TestRouting(t *testing.T) {
	h := newHarness(t, options{})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/nope", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
		h.request(http.MethodGet, "/v1/sandboxes/", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
		h.request(http.MethodGet, "/nope", "", nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("ErrMethodNotAllowed", func(t *testing.T) {
		resp := h.request(http.MethodPut, "/v1/sandboxes", h.token, `{}`)
		resp.fails(t, http.StatusMethodNotAllowed, sandbox.EInvalidRequest)
		allow := resp.header.Get("Allow")
		if !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
			t.Fatalf("Allow %q, want GET and POST", allow)
		}
	})
	t.Run("Options", func(t *testing.T) {
		resp := h.request(http.MethodOptions, "/v1/sandboxes", "", nil)
		if got, want := resp.status, http.StatusNoContent; got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
		if allow := resp.header.Get("Allow"); !strings.Contains(allow, "POST") {
			t.Fatalf("Allow %q, want POST in it", allow)
		}
	})
	t.Run("RequestID", func(t *testing.T) {
		resp := h.request(http.MethodGet, "/healthz", "", nil, "X-Request-Id", "abc-123")
		if got, want := resp.header.Get("X-Request-Id"), "abc-123"; got != want {
			t.Fatalf("X-Request-Id %q, want %q", got, want)
		}
		resp = h.request(http.MethodGet, "/healthz", "", nil, "X-Request-Id", "bad id <x>")
		if got := resp.header.Get("X-Request-Id"); got == "bad id <x>" || got == "" {
			t.Fatalf("X-Request-Id %q: an unsafe id was echoed", got)
		}
	})
	t.Run("Static", func(t *testing.T) {
		srv := New(Config{Backend: h.be, Store: h.reads, Token: testToken, Static: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("page"))
		})})
		for path, want := range map[string]int{"/": http.StatusOK, "/app.js": http.StatusOK, "/v1/sandboxes": http.StatusUnauthorized} {
			rec := newRecorder(srv, http.MethodGet, path)
			if got := rec.Code; got != want {
				t.Fatalf("GET %s: status %d, want %d", path, got, want)
			}
		}
	})
}

// eventPage is the JSON events page, its data kept raw to compare bytes.
type eventPage struct {
	Object        string            `json:"object"`
	Data          []json.RawMessage `json:"data"`
	HasMore       bool              `json:"has_more"`
	NextSince     string            `json:"next_since"`
	OldestEventID string            `json:"oldest_event_id"`
	LastEventID   string            `json:"last_event_id"`
}

func TestEventsPage(t *testing.T) {
	h := newHarness(t, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, 250, 20)
	base := "/v1/sandboxes/" + c.ID + "/events"

	t.Run("OK", func(t *testing.T) {
		recs, err := h.store.Read(context.Background(), c.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []json.RawMessage
		since := "0"
		for pages := 0; ; pages++ {
			var p eventPage
			h.ok(http.MethodGet, base+"?limit=100&since="+since, nil, http.StatusOK, &p)
			if got, want := p.Object, "list"; got != want {
				t.Fatalf("object %q, want %q", got, want)
			}
			if got, want := p.LastEventID, sandbox.FormatID(ids[len(ids)-1]); got != want {
				t.Fatalf("last_event_id %s, want %s", got, want)
			}
			if got, want := p.OldestEventID, sandbox.FormatID(ids[0]); got != want {
				t.Fatalf("oldest_event_id %s, want %s", got, want)
			}
			got = append(got, p.Data...)
			since = p.NextSince
			if !p.HasMore {
				break
			}
			if pages > 3 {
				t.Fatal("more pages than 250 events at 100 a page make")
			}
		}
		if got, want := len(got), len(recs); got != want {
			t.Fatalf("%d events, want %d", got, want)
		}
		for i := range recs {
			if string(got[i]) != string(recs[i].JSON) {
				t.Fatalf("event %d = %s, want the stored %s", i, got[i], recs[i].JSON)
			}
		}
		if got, want := since, sandbox.FormatID(ids[len(ids)-1]); got != want {
			t.Fatalf("next_since after the last page %s, want %s", got, want)
		}
	})
	t.Run("OKDefaults", func(t *testing.T) {
		var p eventPage
		h.ok(http.MethodGet, base, nil, http.StatusOK, &p)
		if got, want := len(p.Data), defaultEventPage; got != want {
			t.Fatalf("%d events, want %d", got, want)
		}
		if got, want := p.NextSince, sandbox.FormatID(ids[defaultEventPage-1]); got != want {
			t.Fatalf("next_since %s, want %s", got, want)
		}
	})
	t.Run("OKEmpty", func(t *testing.T) {
		last := sandbox.FormatID(ids[len(ids)-1])
		resp := h.request(http.MethodGet, base+"?since="+last, h.token, nil)
		var p eventPage
		if err := json.Unmarshal(resp.body, &p); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(resp.body), `"data":[]`) || p.HasMore || p.NextSince != last {
			t.Fatalf("page after the last event: %s", resp.body)
		}
	})
	for _, limit := range []string{"0", "1001", "x"} {
		t.Run("ErrLimit"+limit, func(t *testing.T) {
			h.request(http.MethodGet, base+"?limit="+limit, h.token, nil).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
		})
	}
	for _, cur := range badCursors {
		t.Run("ErrInvalidCursor", func(t *testing.T) {
			h.request(http.MethodGet, base+"?since="+url.QueryEscape(cur), h.token, nil).fails(t, http.StatusBadRequest, sandbox.EInvalidCursor)
		})
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/sandboxes/c_nope/events", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		last := ids[len(ids)-1]
		e := h.request(http.MethodGet, base+"?since="+strconv.FormatUint(last+5, 10), h.token, nil).fails(t, http.StatusGone, sandbox.ECursorStale)
		checkMarks(t, e, ids[0], 0, last)
	})
	for _, cur := range oversizedCursors {
		t.Run("ErrCursorStaleOversized", func(t *testing.T) {
			last := ids[len(ids)-1]
			e := h.request(http.MethodGet, base+"?since="+cur, h.token, nil).fails(t, http.StatusGone, sandbox.ECursorStale)
			checkMarks(t, e, ids[0], 0, last)
		})
	}
	t.Run("ErrCursorPruned", func(t *testing.T) {
		h.prune(c.ID, ids[99])
		last := ids[len(ids)-1]
		e := h.request(http.MethodGet, base+"?since="+sandbox.FormatID(ids[10]), h.token, nil).fails(t, http.StatusGone, sandbox.ECursorPruned)
		checkMarks(t, e, ids[100], ids[99], last)
		// since=0 is never refused: it reads what is retained.
		var p eventPage
		h.ok(http.MethodGet, base+"?since=0&limit=1", nil, http.StatusOK, &p)
		if got, want := string(p.Data[0]), `"id":"`+sandbox.FormatID(ids[100])+`"`; !strings.Contains(got, want) {
			t.Fatalf("first retained event %s, want id %s", got, want)
		}
	})
}

// badCursors are cursors that are not a non-negative decimal integer.
var badCursors = []string{"-1", "abc", "1.5", " 1", "1 ", "+1", "0x10", "1e3", "１", ""}

// oversizedCursors are decimal integers beyond 64 bits: beyond the last id
// of any log, so cursor_stale (docs/stream.md), not invalid_cursor.
var oversizedCursors = []string{"18446744073709551616", "99999999999999999999999", strings.Repeat("9", 400)}

func checkMarks(t testing.TB, e apiError, oldest, pruned, last uint64) {
	t.Helper()
	for _, m := range []struct {
		name string
		got  *string
		want uint64
	}{
		{"oldest_event_id", e.Error.OldestEventID, oldest},
		{"pruned_through", e.Error.PrunedThrough, pruned},
		{"last_event_id", e.Error.LastEventID, last},
	} {
		if m.got == nil {
			t.Fatalf("error has no %s", m.name)
		}
		if got, want := *m.got, sandbox.FormatID(m.want); got != want {
			t.Fatalf("%s = %s, want %s", m.name, got, want)
		}
	}
}

func newRecorder(h http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}
