package cli

import (
	"fmt"
	"strings"

	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// mcpServers reads the --mcp flags of sandbox create: NAME=URL for an
// http server, NAME=COMMAND for a stdio one, its words split as --agent
// splits a command (quotes kept, nothing expanded). Env and headers,
// which are secrets, are for the API or the Go client.
func mcpServers(flags []string) ([]sandbox.MCPServerConfig, error) {
	var out []sandbox.MCPServerConfig
	for _, f := range flags {
		name, rest, ok := strings.Cut(f, "=")
		if !ok || name == "" || strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("--mcp %q: want NAME=COMMAND or NAME=URL", f)
		}
		if strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://") {
			out = append(out, sandbox.MCPServerConfig{Name: name, Type: sandbox.MCPHTTP, URL: rest})
			continue
		}
		words, err := registry.SplitWords(rest)
		if err != nil {
			return nil, fmt.Errorf("--mcp %s: %w", name, err)
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("--mcp %s: the command is empty", name)
		}
		out = append(out, sandbox.MCPServerConfig{Name: name, Command: words[0], Args: words[1:]})
	}
	return out, nil
}
