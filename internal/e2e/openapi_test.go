package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/apitest"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// These tests hold the OpenAPI document (server/openapi.json) to the real
// server: the server as `sparkles serve` wires it (Main), the demo agent as
// its own process, driven through every route, every error answer it can
// give here and every event type. Each answer, each page and each SSE
// frame is validated against the document with its answer schemas closed,
// so a field, a status, an event type or a value the document does not
// describe fails the test, as does one it describes wrongly. Then the
// document is broken on purpose, one part at a time, and each broken
// document must fail some of the recorded answers: proof that those parts
// are checked at all.

const openAPIToken = "openapi-test-token"

// Ids of the right shape that name nothing.
const (
	noSandbox  = "c_00000000000000000000000000"
	noTurn     = "turn_00000000000000000000000000"
	noApproval = "appr_00000000000000000000000000"
)

func TestOpenAPIConformance(t *testing.T) {
	file, err := os.ReadFile(repoFile("server/openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := apitest.Closed(file)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := apitest.Load(closed)
	if err != nil {
		t.Fatal(err)
	}
	m := &app.Main{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: openAPIToken, Logger: slog.New(slog.DiscardHandler),
		Agents: registry.Registry{
			"demo": {Command: binary, Args: []string{"agent", "demo"}},
			// An agent whose command is not there: its sandboxes fail to boot.
			"broken": {Command: filepath.Join(t.TempDir(), "no-such-agent")},
		},
		DefaultAgent: "demo",
		// The webhook endpoint below is on loopback.
		WebhookAllowPrivate: true,
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	r := &apiRecorder{t: t, spec: spec, base: "http://" + m.Listener.Addr().String(), hc: &http.Client{Timeout: 30 * time.Second}, pageTypes: map[string]bool{}, unrouted: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	A := apitest.Accepted

	// The served document is the one in the tree.
	if got := r.want(200, call{name: "openapi", judge: A, method: "GET", path: "/v1/openapi.json"}, nil); !bytes.Equal(got, file) {
		t.Fatal("GET /v1/openapi.json is not server/openapi.json")
	}
	r.want(200, call{name: "healthz", judge: A, method: "GET", path: "/healthz", token: "-"}, nil)
	r.want(200, call{name: "readyz", judge: A, method: "GET", path: "/readyz", token: "-"}, nil)
	r.want(200, call{name: "metrics", judge: A, method: "GET", path: "/metrics"}, nil)
	// GET /v1/agents is in the document ahead of the router (see
	// awaitedRoutes in server): checked once it answers.
	if status, _ := r.unchecked(call{name: "agents", method: "GET", path: "/v1/agents"}); status == http.StatusNotFound {
		t.Log("GET /v1/agents is not routed yet; its answer is not checked")
		r.unrouted["GET /v1/agents"] = true
	} else {
		r.do(call{name: "agents", judge: A, method: "GET", path: "/v1/agents"})
	}
	var check struct {
		Ready bool `json:"ready"`
	}
	if r.want(200, call{name: "check agent", judge: A, method: "GET", path: "/v1/agents/demo/check"}, &check); !check.Ready {
		t.Error("GET /v1/agents/demo/check: the demo agent is not ready")
	}
	r.want(404, call{name: "check no agent", judge: A, method: "GET", path: "/v1/agents/nobody/check"}, nil)

	// A sandbox of the demo agent, followed from its first event.
	var sb created
	r.want(201, call{name: "create", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{
		"metadata": map[string]string{"app": "openapi-test"}, "env": map[string]string{"GREETING": "hi"}, "secrets": map[string]string{"API_KEY": "sk-openapi-test-secret-0123456789"},
		"tool_output": true,
	})}, &sb)
	sbPath := "/v1/sandboxes/" + sb.ID
	// A webhook endpoint receives the turns' ends (checked below).
	hooks := make(chan string, 64) // the webhook-id of each delivery
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case hooks <- req.Header.Get("webhook-id"):
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	var wh idOnly
	r.want(201, call{name: "create webhook", judge: A, method: "POST", path: "/v1/webhooks", body: jsonBody(map[string]any{
		"url": receiver.URL + "/hooks", "sandbox_id": sb.ID, "events": []string{"turn.completed", "sandbox.error"}, "description": "openapi"})}, &wh)
	r.want(400, call{name: "create webhook ftp", judge: A, method: "POST", path: "/v1/webhooks", body: jsonBody(map[string]any{"url": "ftp://x/"})}, nil)
	r.want(400, call{name: "create webhook ephemeral type", judge: apitest.Refused, method: "POST", path: "/v1/webhooks", body: jsonBody(map[string]any{"url": receiver.URL, "events": []string{"message.delta"}})}, nil)
	s1 := r.stream(call{name: "stream since 0", judge: A, path: sbPath + "/events/stream?since=0"})
	s1.until(ctx, typeIs("snapshot"))

	// 1. A plain turn: messages, tools, a plan, a command's output, its
	// usage, the final message.
	var turn idOnly
	r.want(202, call{name: "turn", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello, with a plan, its output and usage"})}, &turn)
	s1.until(ctx, turnCompleted(turn.ID))
	r.want(200, call{name: "get turn", judge: A, method: "GET", path: sbPath + "/turns/" + turn.ID}, nil)

	// 1b. The agent config: a mode it offers, one it does not, a body
	// without config.
	r.want(200, call{name: "patch config", judge: A, method: "PATCH", path: sbPath, body: jsonBody(map[string]any{"config": map[string]string{"mode": "plan"}})}, nil)
	s1.until(ctx, typeIs("sandbox.updated"))
	r.want(400, call{name: "patch unknown mode", judge: A, method: "PATCH", path: sbPath, body: jsonBody(map[string]any{"config": map[string]string{"mode": "yolo"}})}, nil)
	r.want(400, call{name: "patch no config", judge: apitest.Refused, method: "PATCH", path: sbPath, body: []byte(`{}`)}, nil)

	// 2. An approval, approved; answering it again is approval_resolved.
	r.want(202, call{name: "turn write", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "please write notes.txt"})}, &turn)
	evs := s1.until(ctx, typeIs("approval.requested"))
	appr := evs[len(evs)-1].field("approval_id")
	r.want(200, call{name: "approve", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "approve"})}, nil)
	r.want(409, call{name: "approve again", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "approve"})}, nil)
	s1.until(ctx, turnCompleted(turn.ID))

	// 2b. The workspace: what the turn wrote, its diff, the files and
	// archive routes, and a revert of the turn.
	wrote := turn.ID
	octets := []string{"Content-Type", "application/octet-stream"}
	r.want(200, call{name: "diff", judge: A, method: "GET", path: sbPath + "/turns/" + wrote + "/diff"}, nil)
	r.want(404, call{name: "diff no turn", judge: A, method: "GET", path: sbPath + "/turns/" + noTurn + "/diff"}, nil)
	r.want(200, call{name: "files", judge: A, method: "GET", path: sbPath + "/files"}, nil)
	r.want(200, call{name: "file", judge: A, method: "GET", path: sbPath + "/files/notes.txt"}, nil)
	r.want(201, call{name: "put file", judge: A, method: "PUT", path: sbPath + "/files/docs%2Fa.bin", body: []byte("a"), header: octets}, nil)
	r.want(200, call{name: "replace file", judge: A, method: "PUT", path: sbPath + "/files/docs%2Fa.bin", body: []byte("b"), header: octets}, nil)
	r.want(412, call{name: "put stale", judge: A, method: "PUT", path: sbPath + "/files/docs%2Fa.bin", body: []byte("c"), header: append([]string{"If-Match", `"0"`}, octets...)}, nil)
	r.want(200, call{name: "dir", judge: A, method: "GET", path: sbPath + "/files/docs?limit=1"}, nil)
	r.want(400, call{name: "file out", judge: apitest.Unjudged, method: "GET", path: sbPath + "/files/%2e%2e%2Fx"}, nil)
	r.want(409, call{name: "delete dir", judge: A, method: "DELETE", path: sbPath + "/files/docs"}, nil)
	r.want(200, call{name: "delete file", judge: A, method: "DELETE", path: sbPath + "/files/docs%2Fa.bin"}, nil)
	r.want(200, call{name: "archive", judge: A, method: "GET", path: sbPath + "/archive"}, nil)
	r.want(200, call{name: "put archive", judge: A, method: "PUT", path: sbPath + "/archive?path=up", body: emptyTar(), header: []string{"Content-Type", "application/x-tar"}}, nil)
	r.want(200, call{name: "logs", judge: A, method: "GET", path: sbPath + "/logs?tail=20"}, nil)
	r.want(200, call{name: "revert", judge: A, method: "POST", path: sbPath + "/turns/" + wrote + "/revert"}, nil)
	s1.until(ctx, typeIs("workspace.reverted"))

	// 3. An approval denied by its option id; malformed decisions first.
	r.want(202, call{name: "turn write 2", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "write denied.txt"})}, &turn)
	evs = s1.until(ctx, typeIs("approval.requested"))
	var req struct {
		ApprovalID string `json:"approval_id"`
		Options    []struct {
			OptionID string `json:"option_id"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(evs[len(evs)-1].Data, &req); err != nil {
		t.Fatal(err)
	}
	reject := ""
	for _, o := range req.Options {
		if o.Kind == "reject_once" {
			reject = o.OptionID
		}
	}
	apprPath := sbPath + "/approvals/" + req.ApprovalID
	r.want(400, call{name: "decision and option", judge: apitest.Refused, method: "POST", path: apprPath, body: jsonBody(map[string]string{"decision": "deny", "option_id": reject})}, nil)
	r.want(400, call{name: "decision unknown", judge: apitest.Refused, method: "POST", path: apprPath, body: jsonBody(map[string]string{"decision": "maybe"})}, nil)
	r.want(400, call{name: "decision empty", judge: apitest.Refused, method: "POST", path: apprPath, body: []byte(`{}`)}, nil)
	r.want(200, call{name: "deny by option", judge: A, method: "POST", path: apprPath, body: jsonBody(map[string]string{"option_id": reject})}, nil)
	s1.until(ctx, turnCompleted(turn.ID))

	// 4. An approval pending when its turn is canceled.
	r.want(202, call{name: "turn write 3", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "write pending.txt"})}, &turn)
	evs = s1.until(ctx, typeIs("approval.requested"))
	appr = evs[len(evs)-1].field("approval_id")
	r.want(202, call{name: "cancel at approval", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel"}, nil)
	s1.until(ctx, turnCompleted(turn.ID))
	r.want(409, call{name: "decide canceled", judge: A, method: "POST", path: sbPath + "/approvals/" + appr, body: jsonBody(map[string]string{"decision": "deny"})}, nil)

	// 5. A turn that hangs: another is refused while it runs; canceled.
	r.want(202, call{name: "turn hang", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hang"})}, &turn)
	s1.until(ctx, func(ev streamEvent) bool {
		return ev.Type == "message.updated" && strings.Contains(ev.field("text"), "Working on it")
	})
	r.want(409, call{name: "turn in progress", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	// Two turns queued behind it: the first runs once it ends, the
	// second is canceled while it waits.
	var queued, dropped idOnly
	r.want(202, call{name: "turn queued", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]any{"input": "hello", "queue": true})}, &queued)
	r.want(202, call{name: "turn queued 2", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]any{"input": "hello again", "queue": true})}, &dropped)
	r.want(200, call{name: "get queued turn", judge: A, method: "GET", path: sbPath + "/turns/" + queued.ID}, nil)
	r.want(202, call{name: "cancel queued", judge: A, method: "POST", path: sbPath + "/turns/" + dropped.ID + "/cancel"}, nil)
	r.want(200, call{name: "sandbox with a turn", judge: A, method: "GET", path: sbPath}, nil)
	r.want(400, call{name: "cancel with a body", judge: apitest.Refused, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel", body: []byte(`{"now":true}`)}, nil)
	r.want(202, call{name: "cancel", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel", body: []byte(`{}`)}, nil)
	s1.until(ctx, turnCompleted(turn.ID))
	s1.until(ctx, turnCompleted(queued.ID))
	r.do(call{name: "cancel done turn", judge: A, method: "POST", path: sbPath + "/turns/" + turn.ID + "/cancel"})

	// 6. The agent crashes mid-turn: sandbox.error agent_exited.
	r.want(202, call{name: "turn crash", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "crash"})}, &turn)
	s1.until(ctx, typeIs("sandbox.error"))
	s1.until(ctx, turnCompleted(turn.ID))

	// The webhook endpoint: its reads, a change, a retry of a delivery
	// it took, its deliveries, a rotation, its removal.
	whPath := "/v1/webhooks/" + wh.ID
	r.want(200, call{name: "webhooks", judge: A, method: "GET", path: "/v1/webhooks"}, nil)
	r.want(200, call{name: "webhook", judge: A, method: "GET", path: whPath}, nil)
	r.want(404, call{name: "no webhook", judge: A, method: "GET", path: "/v1/webhooks/wh_00000000000000000000000000"}, nil)
	r.want(200, call{name: "patch webhook", judge: A, method: "PATCH", path: whPath, body: jsonBody(map[string]any{"description": "openapi, changed", "enabled": true})}, nil)
	var delivered string
	select {
	case delivered = <-hooks:
	case <-ctx.Done():
		t.Fatal("no webhook delivery arrived")
	}
	r.want(200, call{name: "retry delivery", judge: A, method: "POST", path: whPath + "/deliveries/" + delivered + "/retry"}, nil)
	r.want(404, call{name: "retry no delivery", judge: A, method: "POST", path: whPath + "/deliveries/" + wh.ID + "_" + sb.ID + "_999999/retry"}, nil)
	r.want(200, call{name: "deliveries", judge: A, method: "GET", path: whPath + "/deliveries"}, nil)
	r.want(200, call{name: "rotate secret", judge: A, method: "POST", path: whPath + "/rotate-secret"}, nil)
	r.want(200, call{name: "delete webhook", judge: A, method: "DELETE", path: whPath}, nil)
	r.want(404, call{name: "delete webhook again", judge: A, method: "DELETE", path: whPath}, nil)

	// Reads, pages and their errors.
	r.want(200, call{name: "sandbox", judge: A, method: "GET", path: sbPath}, nil)
	r.want(404, call{name: "no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox}, nil)
	r.want(404, call{name: "no turn", judge: A, method: "GET", path: sbPath + "/turns/" + noTurn}, nil)
	r.want(404, call{name: "cancel no turn", judge: A, method: "POST", path: sbPath + "/turns/" + noTurn + "/cancel"}, nil)
	r.want(404, call{name: "turn no sandbox", judge: A, method: "POST", path: "/v1/sandboxes/" + noSandbox + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.do(call{name: "decide no approval", judge: A, method: "POST", path: sbPath + "/approvals/" + noApproval, body: jsonBody(map[string]string{"decision": "approve"})})
	var page struct {
		HasMore   bool   `json:"has_more"`
		NextSince string `json:"next_since"`
		Last      string `json:"last_event_id"`
	}
	for since := "0"; ; since = page.NextSince {
		r.want(200, call{name: "events page", judge: A, method: "GET", path: sbPath + "/events?limit=7&since=" + since}, &page)
		if !page.HasMore {
			break
		}
	}
	r.want(200, call{name: "events header cursor", judge: A, method: "GET", path: sbPath + "/events", header: []string{"Last-Event-ID", "3"}}, nil)
	r.want(200, call{name: "events at the end", judge: A, method: "GET", path: sbPath + "/events?since=" + page.Last}, nil)
	r.want(410, call{name: "events stale", judge: A, method: "GET", path: sbPath + "/events?since=999999"}, nil)
	r.want(400, call{name: "events bad cursor", judge: apitest.Refused, method: "GET", path: sbPath + "/events?since=-1"}, nil)
	r.want(400, call{name: "events bad limit", judge: apitest.Refused, method: "GET", path: sbPath + "/events?limit=1001"}, nil)
	r.want(404, call{name: "events no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox + "/events"}, nil)
	r.want(410, call{name: "stream stale", judge: A, method: "GET", path: sbPath + "/events/stream", header: []string{"Last-Event-ID", "999999"}}, nil)
	r.want(400, call{name: "stream bad cursor", judge: apitest.Refused, method: "GET", path: sbPath + "/events/stream?since=x"}, nil)
	r.want(404, call{name: "stream no sandbox", judge: A, method: "GET", path: "/v1/sandboxes/" + noSandbox + "/events/stream"}, nil)

	// The stream token reads its sandbox and nothing else.
	st := sb.StreamToken
	r.want(200, call{name: "stream token: sandbox", judge: A, method: "GET", path: sbPath, token: st}, nil)
	r.want(200, call{name: "stream token: events", judge: A, method: "GET", path: sbPath + "/events", token: st}, nil)
	live := r.stream(call{name: "stream token: stream", judge: A, path: sbPath + "/events/stream", token: st})
	live.until(ctx, typeIs("snapshot"))
	live.cancel()
	r.want(403, call{name: "stream token: turn", judge: apitest.Unjudged, method: "POST", path: sbPath + "/turns", token: st, body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.want(403, call{name: "stream token: list", judge: apitest.Unjudged, method: "GET", path: "/v1/sandboxes", token: st}, nil)
	r.want(403, call{name: "stream token: other sandbox", judge: apitest.Unjudged, method: "GET", path: "/v1/sandboxes/" + noSandbox, token: st}, nil)
	r.want(403, call{name: "stream token: document", judge: apitest.Unjudged, method: "GET", path: "/v1/openapi.json", token: st}, nil)

	// Without a token, or with a wrong one.
	r.want(401, call{name: "no token", judge: apitest.Refused, method: "GET", path: "/v1/sandboxes", token: "-"}, nil)
	r.want(401, call{name: "no token: document", judge: apitest.Refused, method: "GET", path: "/v1/openapi.json", token: "-"}, nil)
	r.want(401, call{name: "no token: metrics", judge: apitest.Refused, method: "GET", path: "/metrics", token: "-"}, nil)
	r.want(401, call{name: "no token: stream", judge: apitest.Refused, method: "GET", path: sbPath + "/events/stream", token: "-"}, nil)
	r.want(401, call{name: "wrong token", judge: apitest.Unjudged, method: "GET", path: sbPath, token: "not-the-token"}, nil)

	// Bodies the server refuses, and so does the document.
	r.want(400, call{name: "create unknown field", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: []byte(`{"agent":"demo","colour":"red"}`)}, nil)
	r.want(400, call{name: "create bad env", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{"env": map[string]string{"1BAD": "x"}})}, nil)
	r.want(400, call{name: "create unknown agent", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]string{"agent": "nope"})}, nil)
	mcp := func(servers ...map[string]any) []byte { return jsonBody(map[string]any{"mcp_servers": servers}) }
	files := map[string]any{"name": "files", "command": "/usr/bin/mcp-files", "args": []string{"--ro"}, "env": map[string]string{"FILES_KEY": "v"}}
	r.want(201, call{name: "create mcp", judge: A, method: "POST", path: "/v1/sandboxes", body: mcp(files,
		map[string]any{"name": "web", "type": "http", "url": "https://mcp.example/", "headers": map[string]string{"Authorization": "Bearer k"}})}, nil)
	r.want(400, call{name: "create mcp twice", judge: A, method: "POST", path: "/v1/sandboxes", body: mcp(files, files)}, nil)
	r.want(400, call{name: "create mcp no url", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: mcp(map[string]any{"name": "web", "type": "http"})}, nil)
	r.want(400, call{name: "create mcp bad name", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: mcp(map[string]any{"name": "a b", "command": "x"})}, nil)
	r.want(400, call{name: "create mcp credentials", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: mcp(map[string]any{"name": "web", "type": "sse", "url": "https://u:p@mcp.example/"})}, nil)
	r.want(415, call{name: "create text body", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: []byte(`{}`), header: []string{"Content-Type", "text/plain"}}, nil)
	r.want(413, call{name: "create huge body", judge: apitest.Refused, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]any{"metadata": map[string]string{"big": strings.Repeat("x", 2<<20)}})}, nil)
	r.want(413, call{name: "turn huge body", judge: apitest.Unjudged, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": strings.Repeat("x", 2<<20)})}, nil)
	r.want(400, call{name: "turn no input", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: []byte(`{}`)}, nil)
	r.want(400, call{name: "turn blank input", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": " \n"})}, nil)
	r.want(400, call{name: "turn unknown field", judge: apitest.Refused, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]any{"input": "hi", "model": "x"})}, nil)
	r.want(400, call{name: "list bad limit", judge: apitest.Refused, method: "GET", path: "/v1/sandboxes?limit=0"}, nil)

	// Answers that no operation describes: a wrong method, no such path.
	status, body := r.unchecked(call{name: "wrong method", method: "PUT", path: "/v1/sandboxes"})
	if status != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /v1/sandboxes = %d %s, want 405", status, body)
	}
	r.checkSchema("BadRequestError", body)
	status, body = r.unchecked(call{name: "no route", method: "GET", path: "/v1/nothing-here"})
	if status != http.StatusNotFound {
		t.Fatalf("GET /v1/nothing-here = %d %s, want 404", status, body)
	}
	r.checkSchema("NotFoundError", body)

	// A sandbox whose agent cannot start: sandbox.error outside any turn.
	var broken created
	r.want(201, call{name: "create broken", judge: A, method: "POST", path: "/v1/sandboxes", body: jsonBody(map[string]string{"agent": "broken"})}, &broken)
	s2 := r.stream(call{name: "stream broken", judge: A, path: "/v1/sandboxes/" + broken.ID + "/events/stream?since=0"})
	s2.until(ctx, typeIs("sandbox.error"))
	s2.cancel()

	// Lists, paged.
	var list struct {
		Data    []idOnly `json:"data"`
		HasMore bool     `json:"has_more"`
	}
	r.want(200, call{name: "list", judge: A, method: "GET", path: "/v1/sandboxes?limit=1"}, &list)
	if !list.HasMore || len(list.Data) != 1 {
		t.Fatalf("GET /v1/sandboxes?limit=1: %+v, want one sandbox and more", list)
	}
	r.want(200, call{name: "list after", judge: A, method: "GET", path: "/v1/sandboxes?after=" + list.Data[0].ID}, nil)

	// Delete: the stream sees the status; a deleted sandbox takes no turn.
	r.want(200, call{name: "delete", judge: A, method: "DELETE", path: sbPath}, nil)
	s1.until(ctx, func(ev streamEvent) bool { return ev.Type == "sandbox.status" && ev.field("status") == "deleted" })
	s1.cancel()
	r.want(200, call{name: "delete again", judge: A, method: "DELETE", path: sbPath}, nil)
	r.want(409, call{name: "turn on deleted", judge: A, method: "POST", path: sbPath + "/turns", body: jsonBody(map[string]string{"input": "hello"})}, nil)
	r.want(404, call{name: "delete no sandbox", judge: A, method: "DELETE", path: "/v1/sandboxes/" + noSandbox}, nil)

	// Retention passes the cursor: cursor_pruned, page and stream.
	if _, err := m.Store.Prune(ctx, sb.ID, 5, 0); err != nil {
		t.Fatal(err)
	}
	r.want(410, call{name: "events pruned", judge: A, method: "GET", path: sbPath + "/events?since=2"}, nil)
	r.want(410, call{name: "stream pruned", judge: A, method: "GET", path: sbPath + "/events/stream", header: []string{"Last-Event-ID", "2"}}, nil)
	r.want(200, call{name: "events after pruning", judge: A, method: "GET", path: sbPath + "/events?since=0&limit=3"}, nil)
	replay := r.stream(call{name: "stream after pruning", judge: A, path: sbPath + "/events/stream?since=0"})
	replay.until(ctx, typeIs("turn.completed"))
	replay.cancel()

	// Not ready, then broken: 503 from /readyz, 500 from the API.
	if err := m.Retainer.Close(); err != nil {
		t.Fatal(err)
	}
	r.want(503, call{name: "readyz not ready", judge: A, method: "GET", path: "/readyz", token: "-"}, nil)
	if err := m.Store.Close(); err != nil {
		t.Fatal(err)
	}
	m.Retainer, m.Store = nil, nil // closed; /readyz is not asked again
	r.want(500, call{name: "store closed", judge: A, method: "GET", path: "/v1/sandboxes"}, nil)

	if t.Failed() {
		return
	}
	checkCoverage(t, r)
	checkBrokenDocuments(t, r, file)
}

// emptyTar is a tar of one directory.
func emptyTar() []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.Close()
	return b.Bytes()
}
