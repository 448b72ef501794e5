package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestCheckAgent: the full token checks an agent and gets what each step
// found, an agent that does not start is a 200 that says so, an unknown
// name is not_found, and a stream token may not ask.
func TestCheckAgent(t *testing.T) {
	dir := t.TempDir()
	st := bolttest.MustOpenAt(t, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	t.Cleanup(func() { st.Close() })
	co, err := coordinator.New(coordinator.Config{
		Store: st, DataDir: dir,
		Agents:   registry.Registry{"boom": {Command: "/bin/sh", Args: []string{"-c", "echo boom >&2; exit 3"}}},
		Builtins: map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	ts := httptest.NewServer(New(Config{Backend: co, Store: st, Token: testToken}))
	t.Cleanup(ts.Close)

	get := func(token, name string) (int, sandbox.AgentCheck, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/agents/"+name+"/check", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ch sandbox.AgentCheck
		json.Unmarshal(b, &ch)
		return resp.StatusCode, ch, string(b)
	}
	t.Run("OK", func(t *testing.T) {
		status, ch, body := get(testToken, "demo")
		if status != http.StatusOK || !ch.Ready || len(ch.Steps) == 0 {
			t.Fatalf("check demo: %d %s, want 200 and ready", status, body)
		}
	})
	t.Run("OKNotReady", func(t *testing.T) {
		status, ch, body := get(testToken, "boom")
		if status != http.StatusOK || ch.Ready || ch.Stderr != "boom" {
			t.Fatalf("check boom: %d %s, want 200, not ready, its stderr", status, body)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		if status, _, body := get(testToken, "nobody"); status != http.StatusNotFound {
			t.Fatalf("check nobody: %d %s, want 404", status, body)
		}
	})
	t.Run("ErrForbidden", func(t *testing.T) {
		if status, _, body := get(StreamToken(testToken, "c_01jx4d8m2q7r0v5b3n6k9p1w2z"), "demo"); status != http.StatusForbidden {
			t.Fatalf("a stream token checked an agent: %d %s", status, body)
		}
	})
}
