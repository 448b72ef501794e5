package sparklestest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestCurationEverySurface: a sandbox with every part of the agent's
// surface on (its commands' output, an MCP server whose env holds a
// secret, a mode), and a turn of the demo agent that uses each (a plan,
// live usage, the output of a command, the MCP servers it was given, its
// mode) and echoes its environment, leaves no secret value, no raw ACP
// field and no host path of the server in anything a client reads: the
// JSON events pages, the stream with its snapshot, the sandbox, the turn
// and the list.
func TestCurationEverySurface(t *testing.T) {
	const (
		secret    = "canary-curation-5b1e0f"
		mcpSecret = "mcp-canary-8c2d4a"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := sparklestest.Start(t)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{
		Env:        map[string]string{"PLAIN": "visible-value"},
		Secrets:    map[string]string{"API_KEY": secret},
		ToolOutput: true,
		MCPServers: []sandbox.MCPServerConfig{{Name: "probe", Command: "/bin/true", Env: map[string]string{"PROBE_TOKEN": mcpSecret}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer st.Close()
	r := &run{t: t, ctx: ctx, srv: srv, sb: sb, stream: st}
	turn, err := srv.Client.StartTurn(ctx, sb.ID, "env plan usage output mcp mode")
	if err != nil {
		t.Fatal(err)
	}
	evs := r.until(func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted })
	seen := map[sandbox.Type]bool{}
	for _, ev := range evs {
		seen[ev.Type] = true
	}
	for _, typ := range []sandbox.Type{sandbox.TypePlanUpdated, sandbox.TypeTurnUsage, sandbox.TypeToolOutput} {
		if !seen[typ] {
			t.Errorf("no %s in the turn: %s", typ, kinds(evs))
		}
	}

	var all strings.Builder
	get := func(path string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		var body io.Reader = resp.Body
		if strings.HasSuffix(path, "/stream") {
			// The snapshot is the first frame: read up to its end.
			var frame strings.Builder
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 4<<20)
			for sc.Scan() && sc.Text() != "" {
				frame.WriteString(sc.Text() + "\n")
			}
			if !strings.Contains(frame.String(), "event: snapshot") {
				t.Fatalf("first frame of the stream is not the snapshot:\n%s", frame.String())
			}
			body = strings.NewReader(frame.String())
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&all, "%s\n%s\n", path, b)
	}
	base := "/v1/sandboxes/" + sb.ID
	for _, path := range []string{base + "/events?since=0&limit=1000", base + "/events/stream", base, base + "/turns/" + turn.ID, "/v1/sandboxes"} {
		get(path)
	}
	text := all.String()
	for _, leak := range []string{secret, mcpSecret, srv.DataDir, string(datadir.Dir(srv.DataDir).Sandbox(sb.ID)),
		"rawInput", "rawOutput", "sessionId", "_meta", "terminal_id", "terminal_output", "\x1b["} {
		if strings.Contains(text, leak) {
			t.Errorf("%q reached a client", leak)
		}
	}
	// The demo agent echoed its env and its command printed the secret:
	// without a redaction the test would prove nothing.
	if !strings.Contains(text, "[REDACTED]") || !strings.Contains(text, "visible-value") {
		t.Fatal("the demo agent's echo of its environment is missing: the test proves nothing")
	}
}
