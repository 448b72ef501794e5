package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

func TestServe(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`not json`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"sparkles_probe_tool","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"resources/list"}`,
	}, "\n") + "\n"
	var out strings.Builder
	if err := serve(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", sc.Text(), err)
		}
		got = append(got, m)
	}
	if len(got) != 4 {
		t.Fatalf("%d answers, want 4 (one per request):\n%s", len(got), out.String())
	}
	if v := got[0]["result"].(map[string]any)["protocolVersion"]; v != "2025-03-26" {
		t.Errorf("initialize answered version %v, want the client's", v)
	}
	if !strings.Contains(out.String(), `"name":"`+ProbeTool+`"`) {
		t.Errorf("tools/list does not list %s: %s", ProbeTool, out.String())
	}
	if got[2]["id"] != "c" || !strings.Contains(out.String(), ProbeText) {
		t.Errorf("tools/call answered %v", got[2])
	}
	if e, ok := got[3]["error"].(map[string]any); !ok || e["code"] != float64(-32601) {
		t.Errorf("an unknown method answered %v, want -32601", got[3])
	}
}
