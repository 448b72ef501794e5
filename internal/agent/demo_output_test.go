package agent

import (
	"strings"
	"testing"
)

// TestDemoOutput: on "output" the demo agent streams what its command
// printed, in two chunks, then its exit, to a client that advertised
// terminal output; to any other, none of it.
func TestDemoOutput(t *testing.T) {
	for _, on := range []bool{true, false} {
		caps := `{"fs":{"readTextFile":false,"writeTextFile":false}}`
		if on {
			caps = `{"fs":{"readTextFile":false,"writeTextFile":false},"_meta":{"terminal_output":true}}`
		}
		p := startDemo(t)
		p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":` + caps + `}}`)
		p.recv()
		p.send(`{"jsonrpc":"2.0","id":"s","method":"session/new","params":{"cwd":"/sandbox","mcpServers":[]}}`)
		sid, _ := p.recv()["result"].(map[string]any)["sessionId"].(string)
		p.send(`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"show output"}]}}`)
		var data []string
		var exits []any
		for {
			m := p.recv()
			if m["id"] == float64(1) {
				break
			}
			u, _ := m["params"].(map[string]any)["update"].(map[string]any)
			meta, _ := u["_meta"].(map[string]any)
			if o, ok := meta["terminal_output"].(map[string]any); ok {
				data = append(data, o["data"].(string))
			}
			if e, ok := meta["terminal_exit"].(map[string]any); ok {
				exits = append(exits, e["exit_code"])
				if u["status"] != "completed" {
					t.Fatalf("terminal_exit with status %v, want completed", u["status"])
				}
			}
		}
		if !on {
			if len(data) != 0 || len(exits) != 0 {
				t.Fatalf("without the capability: output %q, exits %v, want none", data, exits)
			}
			continue
		}
		all := strings.Join(data, "")
		if len(data) != 2 || !strings.Contains(all, "\x1b[32m") || !strings.Contains(all, "\nA=1\n") || len(exits) != 1 || exits[0] != float64(0) {
			t.Fatalf("output %q, exits %v, want two chunks with colours and A=1, and exit code 0", data, exits)
		}
	}
}
