package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// mcpProbeTool is the tool internal/mcpstub lists.
const mcpProbeTool = "sparkles_probe_tool"

// mcpServer runs the MCP scenario in a sandbox of its own: created with
// internal/mcpstub as a stdio MCP server, which the agent runs inside its
// confinement (from a.grant, which it may read), its turn must reach the
// model with the stub's tool among the tools (each adapter names it its own
// way: mcp__probe__sparkles_probe_tool…); the demo, which has no model,
// names the server it was given. The value of the server's env leaves the
// server nowhere.
func (s *scenarioRun) mcpServer(token string) {
	t := s.t
	dir := s.a.grant
	if dir == "" {
		dir = t.TempDir()
	}
	bin := filepath.Join(dir, "mcpstub")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sparkles-dev/sparkles/internal/mcpstub").CombinedOutput(); err != nil {
		t.Fatalf("build mcpstub: %v\n%s", err, out)
	}
	const envValue = "mcp-conformance-value-4e1b7c"
	var sb sandbox.Sandbox
	s.p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{
		"agent": s.a.name, "env": s.a.env, "secrets": s.a.secrets,
		"mcp_servers": []map[string]any{{"name": "probe", "command": bin, "env": map[string]string{"PROBE_KEY": envValue}}},
	}, http.StatusCreated, &sb)
	if len(sb.MCPServers) != 1 || sb.MCPServers[0].Name != "probe" || strings.Join(sb.MCPServers[0].EnvKeys, ",") != "PROBE_KEY" {
		t.Errorf("mcp_servers answered %+v, want probe with env key PROBE_KEY", sb.MCPServers)
	}
	rec := newRecorder(t, sb.ID, token)
	rec.follow(s.p)
	m := *s
	m.id, m.rec, m.work = sb.ID, rec, filepath.Join(filepath.Dir(filepath.Dir(s.work)), sb.ID, "work")
	turn := m.startTurn("mcp")
	m.wantStatus(m.completed(turn), sandbox.TurnSucceeded)
	rec.stop()

	if s.a.script == nil {
		var text strings.Builder
		for _, f := range rec.of(turn, sandbox.TypeMessageCompleted) {
			var d sandbox.MessageCompleted
			mustDecode(t, f, &d)
			text.WriteString(d.Text)
		}
		if !strings.Contains(text.String(), "probe (stdio)") {
			t.Errorf("the demo's reply %q does not name the MCP server probe", text.String())
		}
	} else {
		listed := false
		for _, r := range s.a.script.Requests() {
			listed = listed || !r.Side && strings.Contains(string(r.Body), mcpProbeTool)
		}
		if !listed {
			t.Errorf("no request of the agent to the model lists the MCP tool %s; agent log:\n%s", mcpProbeTool, m.agentLog())
		}
	}
	for _, path := range []string{"/v1/sandboxes/" + sb.ID, "/v1/sandboxes/" + sb.ID + "/events?since=0&limit=1000"} {
		var raw json.RawMessage
		s.p.mustCall(http.MethodGet, path, nil, http.StatusOK, &raw)
		m.wantClean("GET "+path, raw)
		if strings.Contains(string(raw), envValue) {
			t.Errorf("GET %s holds the MCP server's env value", path)
		}
	}
	if strings.Contains(s.p.logTail(), envValue) {
		t.Error("the server's log holds the MCP server's env value")
	}
}
