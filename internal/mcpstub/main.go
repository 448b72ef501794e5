// Command mcpstub is the smallest MCP server over stdio, for the tests that
// give a sandbox's agent an MCP server (the conformance suite): it answers
// initialize, ping, tools/list with one tool, ProbeTool, and tools/call of
// it. A line it cannot read is ignored, as MCP's stdio transport allows
// nothing else on stdout; it exits when its stdin ends.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// ProbeTool is the one tool the stub lists: a test finds its name in what
// the agent sends its model.
const ProbeTool = "sparkles_probe_tool"

// ProbeText is what a call of the tool answers.
const ProbeText = "the sparkles probe tool answered"

func main() {
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcpstub:", err)
		os.Exit(1)
	}
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// serve answers the requests read from in on out, one JSON object a line.
func serve(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 16<<20)
	enc := json.NewEncoder(out) // one object and a newline per answer
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" || len(m.ID) == 0 {
			continue // a notification (initialized, cancelled) or an answer: nothing to say
		}
		reply := message{JSONRPC: "2.0", ID: m.ID}
		reply.Result, reply.Error = answer(m.Method, m.Params)
		if err := enc.Encode(reply); err != nil {
			return err
		}
	}
	return sc.Err()
}

func answer(method string, params json.RawMessage) (any, *rpcError) {
	switch method {
	case "initialize":
		// The client's version is answered back: the stub's few methods
		// are the same in every version of MCP.
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(params, &p)
		if p.ProtocolVersion == "" {
			p.ProtocolVersion = "2025-06-18"
		}
		return map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]string{"name": "sparkles-mcpstub", "version": "1"},
		}, nil
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		return map[string]any{"tools": []any{map[string]any{
			"name":        ProbeTool,
			"description": "Answers a fixed sentence; for tests of MCP servers given to agents.",
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}},
		}}}, nil
	case "tools/call":
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(params, &p) != nil || p.Name != ProbeTool {
			return nil, &rpcError{Code: -32602, Message: "unknown tool"}
		}
		return map[string]any{"content": []any{map[string]string{"type": "text", "text": ProbeText}}}, nil
	}
	return nil, &rpcError{Code: -32601, Message: "method not found: " + method}
}
