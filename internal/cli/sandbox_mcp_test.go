package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestMCPServersFlag(t *testing.T) {
	got, err := mcpServers([]string{`files=/usr/bin/mcp-files --root 'a b'`, "docs=https://mcp.example/"})
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.MCPServerConfig{
		{Name: "files", Command: "/usr/bin/mcp-files", Args: []string{"--root", "a b"}},
		{Name: "docs", Type: "http", URL: "https://mcp.example/"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"files", "=x", "files= ", "files=$HOME/x"} {
		if _, err := mcpServers([]string{bad}); err == nil || !strings.Contains(err.Error(), "--mcp") {
			t.Errorf("--mcp %q: err = %v, want one naming --mcp", bad, err)
		}
	}
}
