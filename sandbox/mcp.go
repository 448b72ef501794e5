package sandbox

import (
	"maps"
	"slices"
)

// MCP server transports (ACP McpServer): stdio, which every agent takes,
// and http and sse, which an agent takes when its mcpCapabilities say so.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// MCPServerConfig is an MCP server given to a sandbox's agent at create
// (docs/api.md): a stdio server the agent runs (Command, Args, Env) or an
// http or sse one it reaches (Type, URL, Headers). The values of Env and
// Headers are secrets: they reach the agent and are redacted from every
// string, and no answer carries them (the resource shows MCPServer).
type MCPServerConfig struct {
	Name    string            `json:"name"`
	Type    string            `json:"type,omitempty"` // "" or "stdio", "http", "sse"
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Transport is the server's type, stdio when none is given.
func (c MCPServerConfig) Transport() string {
	if c.Type == "" {
		return MCPStdio
	}
	return c.Type
}

// Public is the server as the sandbox resource shows it: the names of its
// env variables and headers, never their values.
func (c MCPServerConfig) Public() MCPServer {
	return MCPServer{
		Name: c.Name, Type: c.Transport(), Command: c.Command, Args: slices.Clone(c.Args),
		EnvKeys: slices.Sorted(maps.Keys(c.Env)), URL: c.URL, HeaderNames: slices.Sorted(maps.Keys(c.Headers)),
	}
}

// MCPServer is an MCP server of a sandbox as its resource shows it.
type MCPServer struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	Command     string   `json:"command,omitempty"`
	Args        []string `json:"args,omitempty"`
	EnvKeys     []string `json:"env_keys,omitempty"`
	URL         string   `json:"url,omitempty"`
	HeaderNames []string `json:"header_names,omitempty"`
}

// CloneMCPServers returns a deep copy of a sandbox's MCP servers.
func CloneMCPServers(l []MCPServer) []MCPServer {
	l = slices.Clone(l)
	for i := range l {
		l[i].Args = slices.Clone(l[i].Args)
		l[i].EnvKeys = slices.Clone(l[i].EnvKeys)
		l[i].HeaderNames = slices.Clone(l[i].HeaderNames)
	}
	return l
}
