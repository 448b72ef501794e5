package server

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestLogs reads a sandbox's agent log through the API: redacted as every
// string is, the rotated file first, its tail, and followed as the agent
// writes.
func TestLogs(t *testing.T) {
	const secret = "sk-server-logs-secret-0123456789"
	h, dir := filesHarness(t, func(c *coordinator.Config) {
		// As serve wires it: the server's token is redacted too.
		c.Redact = func(id string) []string { return []string{testToken, StreamToken(testToken, id)} }
	})
	var sb created
	h.ok(http.MethodPost, "/v1/sandboxes", map[string]any{"secrets": map[string]string{"KEY": secret}}, http.StatusCreated, &sb)
	base := "/v1/sandboxes/" + sb.ID + "/logs"
	sbDir := datadir.Dir(dir).Sandbox(sb.ID)
	if err := os.MkdirAll(string(sbDir), 0o700); err != nil {
		t.Fatal(err)
	}
	path := sbDir.AgentLog()
	writeLog(t, path+".1", "rotated line\n")
	writeLog(t, path, "key "+secret+"\ntoken "+testToken+"\nread "+filepath.Join(sbDir.Work(), "src", "a.go")+"\n")

	t.Run("OK", func(t *testing.T) {
		resp, body := h.raw("GET", base, nil)
		want := "rotated line\nkey [REDACTED]\ntoken [REDACTED]\nread src/a.go\n"
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("GET logs: %d %q, want %q", resp.StatusCode, body, want)
		}
		if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
			t.Errorf("Content-Type %q", got)
		}
	})
	t.Run("OKTail", func(t *testing.T) {
		resp, body := h.raw("GET", base+"?tail=1", nil)
		if resp.StatusCode != 200 || string(body) != "read src/a.go\n" {
			t.Fatalf("GET logs?tail=1: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("OKFollow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", h.url+base+"?follow=true&tail=0", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("follow: %d", resp.StatusCode)
		}
		// The headers are out, so the request has started: what the
		// agent writes now is what the follow must bring.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("later " + secret + "\n")
		f.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "later [REDACTED]\n" {
			t.Fatalf("follow read %q, %v", line, err)
		}
	})
	t.Run("ErrStreamToken", func(t *testing.T) {
		h.request("GET", base, sb.StreamToken, nil).fails(t, http.StatusForbidden, sandbox.EForbidden)
	})
	t.Run("ErrTail", func(t *testing.T) {
		for _, q := range []string{"?tail=-1", "?tail=x", "?follow=maybe"} {
			h.request("GET", base+q, h.token, nil).fails(t, http.StatusBadRequest, sandbox.EInvalidRequest)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		h.request("GET", "/v1/sandboxes/c_00000000000000000000000000/logs", h.token, nil).fails(t, http.StatusNotFound, sandbox.ENotFound)
	})
}

func writeLog(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
