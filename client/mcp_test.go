package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestMCPServers: through the real server and its demo agent, the
// sandbox's agent gets the MCP servers given at create, and their env and
// header values come back in no answer and no event.
func TestMCPServers(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client
	const envValue, header = "client-mcp-env-8d2e41", "Bearer client-mcp-token-1f7a93"
	servers := []sandbox.MCPServerConfig{
		{Name: "files", Command: "/usr/bin/mcp-files", Env: map[string]string{"FILES_KEY": envValue}},
		{Name: "docs", Type: sandbox.MCPHTTP, URL: "https://mcp.example/", Headers: map[string]string{"Authorization": header}},
	}
	t.Run("OK", func(t *testing.T) {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MCPServers: servers})
		if err != nil {
			t.Fatal(err)
		}
		want := []sandbox.MCPServer{
			{Name: "files", Type: "stdio", Command: "/usr/bin/mcp-files", EnvKeys: []string{"FILES_KEY"}},
			{Name: "docs", Type: "http", URL: "https://mcp.example/", HeaderNames: []string{"Authorization"}},
		}
		if got, _ := json.Marshal(sb.MCPServers); string(got) != string(mustJSON(t, want)) {
			t.Fatalf("mcp_servers = %s, want %s", got, mustJSON(t, want))
		}
		turn, err := c.StartTurn(ctx, sb.ID, "mcp")
		if err != nil {
			t.Fatal(err)
		}
		evs := waitTurn(t, c, sb.ID, turn.ID, 0, nil)
		if got := find[sandbox.MessageCompleted](t, evs).Text; !strings.Contains(got, "My MCP servers: files (stdio), docs (http).") {
			t.Fatalf("reply %q does not name the servers", got)
		}
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		all := string(mustJSON(t, evs)) + string(mustJSON(t, got))
		for _, v := range []string{envValue, "client-mcp-token-1f7a93"} {
			if strings.Contains(all, v) {
				t.Errorf("%q came back", v)
			}
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MCPServers: append(servers, servers[0])})
		if e := wantType(t, err, sandbox.EInvalidRequest, 400); !strings.Contains(e.Message, "given twice") {
			t.Fatalf("message %q does not say the name is given twice", e.Message)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
