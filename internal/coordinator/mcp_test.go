package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestMCPServersInvalid(t *testing.T) {
	no := false
	e := newEnv(t, func(cfg *coordinator.Config) {
		nostdio, allow, nohttp := demoAgent(), demoAgent(), demoAgent()
		nostdio.MCP = &registry.MCPPolicy{Stdio: &no}
		allow.MCPCommands = []string{"/usr/bin/mcp-ok"}
		nohttp.MCP = &registry.MCPPolicy{HTTP: &no}
		cfg.Agents = registry.Registry{"demo": demoAgent(), "nostdio": nostdio, "allow": allow, "nohttp": nohttp}
		cfg.DefaultAgent = "demo"
	})
	stdio := func(name, command string) sandbox.MCPServerConfig {
		return sandbox.MCPServerConfig{Name: name, Command: command}
	}
	web := sandbox.MCPServerConfig{Name: "web", Type: "http", URL: "https://mcp.example/"}
	many := make([]sandbox.MCPServerConfig, 17)
	for i := range many {
		many[i] = stdio("s"+string(rune('a'+i)), "mcp")
	}
	bigEnv := map[string]string{}
	for i := range 65 {
		bigEnv["K"+strings.Repeat("x", i)] = "v"
	}
	for _, c := range []struct {
		name    string
		agent   string
		servers []sandbox.MCPServerConfig
		want    string
	}{
		{"TooMany", "", many, "at most 16"},
		{"NoName", "", []sandbox.MCPServerConfig{stdio("", "mcp")}, "mcp_servers[0].name"},
		{"BadName", "", []sandbox.MCPServerConfig{stdio("a b", "mcp")}, "mcp_servers[0].name"},
		{"Duplicate", "", []sandbox.MCPServerConfig{stdio("a", "mcp"), stdio("a", "mcp")}, "given twice"},
		{"NoCommand", "", []sandbox.MCPServerConfig{stdio("a", " ")}, "command is empty"},
		{"UnknownType", "", []sandbox.MCPServerConfig{{Name: "a", Type: "ws", URL: "https://x/"}}, "want stdio"},
		{"StdioWithURL", "", []sandbox.MCPServerConfig{{Name: "a", Command: "mcp", URL: "https://x/"}}, "url and headers are for type http"},
		{"HTTPWithCommand", "", []sandbox.MCPServerConfig{{Name: "a", Type: "http", URL: "https://x/", Command: "mcp"}}, "are for stdio"},
		{"RelativeURL", "", []sandbox.MCPServerConfig{{Name: "a", Type: "http", URL: "/mcp"}}, "absolute http or https URL"},
		{"FileURL", "", []sandbox.MCPServerConfig{{Name: "a", Type: "sse", URL: "file:///etc/passwd"}}, "absolute http or https URL"},
		{"URLCredentials", "", []sandbox.MCPServerConfig{{Name: "a", Type: "http", URL: "https://u:p@x/"}}, "holds credentials"},
		{"HeaderName", "", []sandbox.MCPServerConfig{{Name: "a", Type: "http", URL: "https://x/", Headers: map[string]string{"Bad Name": "v"}}}, "not an HTTP header name"},
		{"HeaderValue", "", []sandbox.MCPServerConfig{{Name: "a", Type: "http", URL: "https://x/", Headers: map[string]string{"X-A": "v\r\nX-B: w"}}}, "line break"},
		{"EnvName", "", []sandbox.MCPServerConfig{{Name: "a", Command: "mcp", Env: map[string]string{"A=B": "v"}}}, "not a variable name"},
		{"EnvHook", "", []sandbox.MCPServerConfig{{Name: "a", Command: "mcp", Env: map[string]string{"LD_PRELOAD": "/x.so"}}}, "LD_PRELOAD is refused"},
		{"EnvTooBig", "", []sandbox.MCPServerConfig{{Name: "a", Command: "mcp", Env: bigEnv}}, "at most 64"},
		{"StdioForbidden", "nostdio", []sandbox.MCPServerConfig{stdio("a", "mcp")}, "registry mcp.stdio"},
		{"CommandNotAllowed", "allow", []sandbox.MCPServerConfig{stdio("a", "/usr/bin/other")}, "registry mcp_commands"},
		{"HTTPNotTaken", "nohttp", []sandbox.MCPServerConfig{web}, "mcpCapabilities.http"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{Agent: c.agent, MCPServers: c.servers})
			var se *sandbox.Error
			if !errors.As(err, &se) || se.Type != sandbox.EInvalidRequest || !strings.Contains(se.Message, c.want) {
				t.Fatalf("err = %v, want invalid_request saying %q", err, c.want)
			}
		})
	}
	t.Run("OK", func(t *testing.T) {
		for agent, servers := range map[string][]sandbox.MCPServerConfig{
			"allow":   {stdio("a", "/usr/bin/mcp-ok")},
			"nostdio": {web},
			"nohttp":  {stdio("a", "mcp")},
		} {
			if _, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{Agent: agent, MCPServers: servers}); err != nil {
				t.Errorf("agent %s: %v", agent, err)
			}
		}
	})
}

// TestMCPServersSecrets: the agent's session gets the servers; the
// resource shows their names, env keys and header names; their values
// leave the server in no answer, no event and no log line, and are
// redacted wherever the agent or the caller writes them.
func TestMCPServersSecrets(t *testing.T) {
	const envValue, token = "mcp-env-value-5c0d1e", "mcp-header-token-9b2f"
	var logs syncbuf.Buffer
	e := newEnv(t, func(cfg *coordinator.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	sb := e.create(sandbox.CreateParams{
		Metadata: map[string]string{"note": "token " + token},
		MCPServers: []sandbox.MCPServerConfig{
			{Name: "files", Command: "/usr/bin/mcp-files", Args: []string{"--key", envValue}, Env: map[string]string{"FILES_KEY": envValue}},
			{Name: "web", Type: "http", URL: "https://mcp.example/", Headers: map[string]string{"Authorization": "Bearer " + token}},
		},
	})
	want := []sandbox.MCPServer{
		{Name: "files", Type: "stdio", Command: "/usr/bin/mcp-files", Args: []string{"--key", "[REDACTED]"}, EnvKeys: []string{"FILES_KEY"}},
		{Name: "web", Type: "http", URL: "https://mcp.example/", HeaderNames: []string{"Authorization"}},
	}
	if got, _ := json.Marshal(sb.MCPServers); string(got) != string(must(json.Marshal(want))) {
		t.Fatalf("mcp_servers = %s, want %s", got, must(json.Marshal(want)))
	}
	e.waitStatus(sb.ID, sandbox.StatusReady)
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "mcp: is "+envValue+" or "+token+" set?"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	var text strings.Builder
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		text.Write(b)
	}
	for _, v := range []any{must(e.store.Sandbox(context.Background(), sb.ID)), must(e.store.State(context.Background(), sb.ID))} {
		b, _ := json.Marshal(v)
		text.Write(b)
	}
	all := text.String()
	if !strings.Contains(all, "My MCP servers: files (stdio), web (http).") {
		t.Fatalf("the demo did not name the servers it was given: %s", all)
	}
	if !strings.Contains(all, "[REDACTED]") {
		t.Fatal("nothing was redacted: the test proves nothing")
	}
	for _, v := range []string{envValue, token} {
		if strings.Contains(all, v) {
			t.Errorf("%q left the server in an answer or an event", v)
		}
		if strings.Contains(logs.String(), v) {
			t.Errorf("%q is in the server's log", v)
		}
	}
}

// TestMCPServersCapability: a transport the registry does not rule out but
// the agent does not advertise fails the boot, saying which capability.
func TestMCPServersCapability(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{MCPServers: []sandbox.MCPServerConfig{{Name: "old", Type: "sse", URL: "https://mcp.example/sse"}}})
	got := e.waitStatus(sb.ID, sandbox.StatusFailed)
	if !strings.Contains(got.StatusDetail, `"old"`) || !strings.Contains(got.StatusDetail, "mcpCapabilities.sse") {
		t.Fatalf("status_detail %q does not name the server and mcpCapabilities.sse", got.StatusDetail)
	}
}
