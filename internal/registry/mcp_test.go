package registry

import (
	"strings"
	"testing"
)

func TestMCPPolicy(t *testing.T) {
	r, err := Parse([]byte(`{"agents": {
		"a": {"command": "a", "mcp": {"stdio": false, "sse": false}},
		"b": {"command": "b", "mcp_commands": ["npx", "/usr/bin/mcp-files"]},
		"c": {"command": "c"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent, transport, command string
		want                      string // "" allowed
	}{
		{"a", "stdio", "npx", "mcp.stdio"},
		{"a", "http", "", ""},
		{"a", "sse", "", "mcpCapabilities.sse"},
		{"b", "stdio", "npx", ""},
		{"b", "stdio", "/usr/bin/mcp-files", ""},
		{"b", "stdio", "mcp-files", "mcp_commands"},
		{"b", "http", "", ""},
		{"c", "stdio", "anything", ""},
		{"c", "sse", "", ""},
	} {
		err := r[c.agent].MCPAllows(c.transport, c.command)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s %q: %v, want allowed", c.agent, c.transport, c.command, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s %q: %v, want an error naming %s", c.agent, c.transport, c.command, err, c.want)
		}
	}
	for _, bad := range []struct{ file, want string }{
		{`{"agents": {"a": {"command": "a", "mcp": {"stdio": false, "ws": true}}}}`, "unknown field"},
		{`{"agents": {"a": {"command": "a", "mcp": true}}}`, "mcp: want an object"},
		{`{"agents": {"a": {"command": "a", "mcp_commands": [""]}}}`, "mcp_commands[0] is empty"},
	} {
		if _, err := Parse([]byte(bad.file)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want an error saying %q", bad.file, err, bad.want)
		}
	}
}
