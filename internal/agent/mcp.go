package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// MCP transports besides stdio, as ACP's McpServer "type" names them.
const (
	MCPHTTP = "http"
	MCPSSE  = "sse"
)

// MCPServer is an MCP server the agent connects to for its session (ACP
// McpServer), given in session/new and session/load. Type "" is stdio: the
// agent runs Command with Args and Env; "http" and "sse" reach URL with
// Headers. Env and Headers values are secrets of the sandbox: this package
// hands them to the agent and nowhere else, never to a log.
type MCPServer struct {
	Name    string
	Type    string
	Command string
	Args    []string
	Env     map[string]string
	URL     string
	Headers map[string]string
}

// nameValue is ACP's EnvVariable and HttpHeader.
type nameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// mcpWire is McpServer on the wire: stdio carries no type, and its args
// and env, like http's headers, are required lists.
type mcpWire struct {
	Type    string      `json:"type,omitempty"`
	Name    string      `json:"name"`
	Command string      `json:"command,omitempty"`
	Args    []string    `json:"args,omitempty"`
	Env     []nameValue `json:"env,omitempty"`
	URL     string      `json:"url,omitempty"`
	Headers []nameValue `json:"headers,omitempty"`
}

func pairs(m map[string]string) []nameValue {
	out := make([]nameValue, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, nameValue{k, m[k]})
	}
	return out
}

func unpair(l []nameValue) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for _, p := range l {
		out[p.Name] = p.Value
	}
	return out
}

// MarshalJSON writes the server in ACP's shape, names sorted so that the
// same servers make the same request.
func (s MCPServer) MarshalJSON() ([]byte, error) {
	if s.Type == "" {
		return json.Marshal(struct {
			Name    string      `json:"name"`
			Command string      `json:"command"`
			Args    []string    `json:"args"`
			Env     []nameValue `json:"env"`
		}{s.Name, s.Command, append([]string{}, s.Args...), pairs(s.Env)})
	}
	return json.Marshal(struct {
		Type    string      `json:"type"`
		Name    string      `json:"name"`
		URL     string      `json:"url"`
		Headers []nameValue `json:"headers"`
	}{s.Type, s.Name, s.URL, pairs(s.Headers)})
}

// UnmarshalJSON reads ACP's shape (the demo agent reads what it is given).
func (s *MCPServer) UnmarshalJSON(b []byte) error {
	var w mcpWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = MCPServer{Name: w.Name, Type: w.Type, Command: w.Command, Args: w.Args, Env: unpair(w.Env), URL: w.URL, Headers: unpair(w.Headers)}
	return nil
}

// checkMCP refuses servers of a transport the agent did not advertise at
// initialize: ACP allows http and sse only to an agent whose
// mcpCapabilities say so, and an agent given one anyway may ignore it
// without a word. The error names the capability.
func checkMCP(servers []MCPServer, caps Capabilities) error {
	for _, s := range servers {
		switch {
		case s.Type == MCPHTTP && !caps.MCPHTTP, s.Type == MCPSSE && !caps.MCPSSE:
			return &MCPError{Server: s.Name, Capability: "mcpCapabilities." + s.Type}
		case s.Type != "" && s.Type != MCPHTTP && s.Type != MCPSSE:
			return fmt.Errorf("MCP server %q has an unknown type %q", s.Name, s.Type)
		}
	}
	return nil
}

// MCPError is why Start failed when the agent cannot take an MCP server it
// was given: its initialize answer lacks Capability.
type MCPError struct {
	Server     string
	Capability string
}

func (e *MCPError) Error() string {
	return fmt.Sprintf("MCP server %q needs %s, which the agent does not advertise", e.Server, e.Capability)
}

// mcpServers is the mcpServers list of session/new and session/load: never
// null, which ACP does not allow.
func (c *Conn) mcpServers() []MCPServer {
	if c.mcp == nil {
		return []MCPServer{}
	}
	return c.mcp
}
