package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// TestListAgents lists the registered agents, with whether each command
// resolves, and nothing of their command lines or environments.
func TestListAgents(t *testing.T) {
	dir := t.TempDir()
	st := bolttest.MustOpenAt(t, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	t.Cleanup(func() { st.Close() })
	co, err := coordinator.New(coordinator.Config{
		Store: st, DataDir: dir,
		Agents: registry.Registry{
			"shell":   {Command: "/bin/sh", Args: []string{"-c", "secret-arg"}},
			"missing": {Command: filepath.Join(dir, "no-such-agent"), Env: map[string]string{"API_KEY": "env-value-4242"}},
		},
		Builtins: map[string]coordinator.BuiltinAgent{"inproc": func(context.Context, io.Reader, io.Writer, []string) error { return nil }},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	ts := httptest.NewServer(New(Config{Backend: co, Store: st, Token: testToken}))
	t.Cleanup(ts.Close)

	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/agents", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get(testToken)
	want := `{"object":"list","data":[{"name":"inproc","available":true},{"name":"missing","available":false},{"name":"shell","available":true}]}`
	if status != http.StatusOK || strings.TrimSpace(body) != want {
		t.Fatalf("GET /v1/agents: %d %s, want 200 %s", status, body, want)
	}
	if status, _ := get(StreamToken(testToken, "c_01jx4d8m2q7r0v5b3n6k9p1w2z")); status != http.StatusForbidden {
		t.Fatalf("a stream token listed the agents: %d", status)
	}
}
