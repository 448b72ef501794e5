package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMCPServerJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   MCPServer
		want string
	}{
		{"Stdio", MCPServer{Name: "files", Command: "/usr/bin/mcp-files", Args: []string{"--root", "."}, Env: map[string]string{"TOKEN": "t1", "A": "b"}},
			`{"name":"files","command":"/usr/bin/mcp-files","args":["--root","."],"env":[{"name":"A","value":"b"},{"name":"TOKEN","value":"t1"}]}`},
		// ACP requires args and env even when empty.
		{"StdioBare", MCPServer{Name: "x", Command: "x"}, `{"name":"x","command":"x","args":[],"env":[]}`},
		{"HTTP", MCPServer{Name: "web", Type: MCPHTTP, URL: "https://mcp.example/", Headers: map[string]string{"Authorization": "Bearer k"}},
			`{"type":"http","name":"web","url":"https://mcp.example/","headers":[{"name":"Authorization","value":"Bearer k"}]}`},
		{"SSE", MCPServer{Name: "old", Type: MCPSSE, URL: "http://127.0.0.1:1/sse"}, `{"type":"sse","name":"old","url":"http://127.0.0.1:1/sse","headers":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			var back MCPServer
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			again, _ := json.Marshal(back)
			if string(again) != tc.want {
				t.Fatalf("round trip: %s, want %s", again, tc.want)
			}
		})
	}
}

// TestStartMCPServers: the session is given the servers, which the demo
// names when asked, and a transport the agent does not advertise fails the
// start with the capability named.
func TestStartMCPServers(t *testing.T) {
	servers := []MCPServer{
		{Name: "files", Command: "/usr/bin/mcp-files", Env: map[string]string{"TOKEN": "env-value-3f9a"}},
		{Name: "web", Type: MCPHTTP, URL: "https://mcp.example/", Headers: map[string]string{"Authorization": "Bearer header-value-77c1"}},
	}
	t.Run("OK", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir(), func(cfg *Config) { cfg.MCPServers = servers })
		if caps := c.Capabilities(); !caps.MCPHTTP || caps.MCPSSE {
			t.Fatalf("capabilities %+v, want the demo's http and no sse", caps)
		}
		if err := c.Prompt("turn_1", "mcp"); err != nil {
			t.Fatal(err)
		}
		text := messageText(t, until(t, c, PromptDone))
		if want := "My MCP servers: files (stdio), web (http)."; !strings.Contains(text, want) {
			t.Fatalf("reply %q does not say %q", text, want)
		}
		for _, v := range []string{"env-value-3f9a", "header-value-77c1"} {
			if strings.Contains(text, v) {
				t.Fatalf("reply %q tells a value %q", text, v)
			}
		}
	})
	t.Run("Load", func(t *testing.T) {
		// session/load gives them too: a later process of the agent goes
		// on with its session and has the servers again.
		dir := t.TempDir()
		first := MustStart(t, "demo", dir)
		if err := first.Prompt("turn_1", "hello"); err != nil {
			t.Fatal(err)
		}
		until(t, first, PromptDone)
		id := first.SessionID()
		first.Close()
		second := MustStart(t, "demo", dir, func(cfg *Config) { cfg.Session, cfg.MCPServers = id, servers[1:] })
		if !second.Resume().Loaded {
			t.Fatalf("resume = %+v, want the session loaded", second.Resume())
		}
		if err := second.Prompt("turn_2", "mcp"); err != nil {
			t.Fatal(err)
		}
		if text := messageText(t, until(t, second, PromptDone)); !strings.Contains(text, "My MCP servers: web (http).") {
			t.Fatalf("reply %q does not name the server given at load", text)
		}
	})
	t.Run("None", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Prompt("turn_1", "mcp"); err != nil {
			t.Fatal(err)
		}
		if text := messageText(t, until(t, c, PromptDone)); !strings.Contains(text, "I was given no MCP servers.") {
			t.Fatalf("reply %q", text)
		}
	})
	t.Run("ErrCapability", func(t *testing.T) {
		cfg := testConfig(t, "demo", t.TempDir())
		cfg.MCPServers = append(servers, MCPServer{Name: "old", Type: MCPSSE, URL: "https://mcp.example/sse"})
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := Start(ctx, cfg)
		if err == nil {
			c.Close()
			t.Fatal("Start succeeded with an sse server the agent does not advertise")
		}
		var me *MCPError
		if !errors.As(err, &me) || me.Server != "old" || me.Capability != "mcpCapabilities.sse" {
			t.Fatalf("err = %v, want an MCPError naming old and mcpCapabilities.sse", err)
		}
	})
}
