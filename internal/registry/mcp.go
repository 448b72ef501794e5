package registry

import (
	"fmt"
	"slices"
)

// MCPPolicy is the operator's word on the MCP servers a sandbox of an
// agent may be given, by transport. An unset field allows it: stdio, which
// every ACP agent takes, and http and sse as far as the agent advertises
// them at initialize. false refuses such a server at create: stdio because
// the operator forbids it (the agent runs it, inside its confinement), http
// or sse because the operator knows the agent does not take it.
type MCPPolicy struct {
	Stdio *bool `json:"stdio,omitempty"`
	HTTP  *bool `json:"http,omitempty"`
	SSE   *bool `json:"sse,omitempty"`
}

// MCPAllows tells whether a server of transport ("stdio", "http", "sse")
// running command (stdio only) may be given to a sandbox of the agent; if
// not, the error says why and which setting of the registry decides it.
func (a Agent) MCPAllows(transport, command string) error {
	var allowed *bool
	if a.MCP != nil {
		switch transport {
		case "stdio":
			allowed = a.MCP.Stdio
		case "http":
			allowed = a.MCP.HTTP
		case "sse":
			allowed = a.MCP.SSE
		}
	}
	if allowed != nil && !*allowed {
		if transport == "stdio" {
			return fmt.Errorf("this server does not allow stdio MCP servers for this agent (registry mcp.stdio)")
		}
		return fmt.Errorf("the agent does not take %s MCP servers (mcpCapabilities.%s; registry mcp.%s)", transport, transport, transport)
	}
	if transport == "stdio" && len(a.MCPCommands) > 0 && !slices.Contains(a.MCPCommands, command) {
		return fmt.Errorf("command %q is not one this server allows for stdio MCP servers of this agent (registry mcp_commands)", command)
	}
	return nil
}
