package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestLogging: each HTTP request is logged with its request id (the
// caller's when it sends a plain one), and every line that names a sandbox
// carries it as sandbox_id: request lines, the coordinator's, the agent's.
func TestLogging(t *testing.T) {
	var out syncbuf.Buffer
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	m := &app.Main{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: "logging-token",
		Agents:       registry.Registry{"demo": {Command: binary, Args: []string{"agent", "demo"}}},
		DefaultAgent: "demo",
		Logger:       slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	url := "http://" + m.Listener.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := client.New(url, "logging-token")
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	live := c.Stream(ctx, sb.ID, client.StreamOptions{})
	defer live.Close()
	turn := startTurn(ctx, t, c, sb.ID, "hello")
	if got := waitCompleted(ctx, t, live, turn.ID).Status; got != sandbox.TurnSucceeded {
		t.Fatalf("turn: status %q", got)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sandboxes/"+sb.ID, nil)
	req.Header.Set("Authorization", "Bearer logging-token")
	req.Header.Set("X-Request-Id", "log-test-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "log-test-1" {
		t.Fatalf("X-Request-Id %q, want the caller's", got)
	}
	live.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	var requestLine bool
	aboutSandbox := 0
	for _, line := range lines() {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["msg"] == "http request" && rec["request_id"] == "log-test-1" {
			requestLine = true
			if rec["status"] != float64(http.StatusOK) || rec["method"] != "GET" {
				t.Errorf("request line %s: want GET and status 200", line)
			}
		}
		if rec["msg"] == "http request" {
			if id, _ := rec["request_id"].(string); id == "" {
				t.Errorf("request line without a request_id: %s", line)
			}
		}
		named := false
		for k, v := range rec {
			if s, ok := v.(string); ok && k != "sandbox_id" && strings.Contains(s, sb.ID) {
				named = true
			}
		}
		if !named && rec["sandbox_id"] == nil {
			continue
		}
		aboutSandbox++
		if rec["sandbox_id"] != sb.ID {
			t.Errorf("a line about %s without its sandbox_id: %s", sb.ID, line)
		}
	}
	if !requestLine {
		t.Errorf("no request line with request_id log-test-1 in:\n%s", strings.Join(lines(), "\n"))
	}
	if aboutSandbox < 3 {
		t.Errorf("%d lines about the sandbox, want the requests' and the coordinator's:\n%s", aboutSandbox, strings.Join(lines(), "\n"))
	}
}

// TestLogFlagsRefused: serve refuses other values of --log-format and
// --log-level with what it accepts.
func TestLogFlagsRefused(t *testing.T) {
	t.Run("ErrBadFormat", func(t *testing.T) {
		serveFails(t, `--log-format "xml": want text or json`, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-format", "xml")
	})
	t.Run("ErrBadLevel", func(t *testing.T) {
		serveFails(t, `--log-level "loud": want debug, info, warn or error`, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-level", "loud")
	})
}
