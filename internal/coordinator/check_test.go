package coordinator_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// nodeAgent is just enough ACP for a boot: it answers initialize and
// session/new, as a Node adapter registered as `node script.js` does.
const nodeAgent = `const rl = require("readline").createInterface({input: process.stdin});
rl.on("line", (line) => {
  const m = JSON.parse(line);
  let result;
  if (m.method === "initialize") result = {protocolVersion: 1, agentCapabilities: {loadSession: true, promptCapabilities: {image: true}, mcpCapabilities: {http: true}}, authMethods: [{id: "node-login", name: "Log in"}]};
  else if (m.method === "session/new") result = {sessionId: "n1"};
  else return;
  process.stdout.write(JSON.stringify({jsonrpc: "2.0", id: m.id, result}) + "\n");
});
`

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// step returns the check's step named name, failing the test without it.
func step(t *testing.T, ch sandbox.AgentCheck, name string) sandbox.CheckStep {
	t.Helper()
	for _, s := range ch.Steps {
		if s.Step == name {
			return s
		}
	}
	t.Fatalf("check of %s has no step %q: %+v", ch.Name, name, ch.Steps)
	return sandbox.CheckStep{}
}

// TestCheckAgent runs the doctor on agents that start and on agents that
// do not: each says at which step it stopped, what it found, and what to
// do; the throwaway sandbox is gone afterwards.
func TestCheckAgent(t *testing.T) {
	dir := t.TempDir()
	wrapper := writeScript(t, dir, "wrapper", "#!/bin/sh\nexport WRAPPED=1\nexec \""+os.Args[0]+"\" sparkles-test-agent\n")
	boom := registry.Agent{Command: "/bin/sh", Args: []string{"-c", "echo boom >&2; echo the key is $API_KEY >&2; exit 3"}, Env: map[string]string{"API_KEY": "sk-check-test-0123456789abcdef"}}
	auth := &scriptAgent{
		authMethods: []map[string]any{{"id": "gemini-api-key", "name": "Gemini API key"}},
		newSession:  map[string]any{"code": -32000, "message": "Authentication required"},
	}
	e := newEnv(t, func(c *coordinator.Config) {
		c.Agents["wrapper"] = registry.Agent{Command: wrapper}
		c.Agents["boom"] = boom
		c.Agents["missing"] = registry.Agent{Command: "sparkles-no-such-agent"}
		c.Builtins = map[string]coordinator.BuiltinAgent{"keyless": auth.run, "wrongkey": auth.run}
		// A key the agent refuses all the same: present, but not what it wants.
		c.Agents["wrongkey"] = registry.Agent{Env: map[string]string{"GEMINI_API_KEY": "not-the-key-0123456789", "MODE": "x"}}
		if node, err := exec.LookPath("node"); err == nil {
			c.Agents["node"] = registry.Agent{Command: node, Args: []string{writeScript(t, dir, "agent.js", nodeAgent)}}
		}
	})
	ctx := context.Background()
	check := func(name string) sandbox.AgentCheck {
		t.Helper()
		ch, err := e.co.CheckAgent(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}

	t.Run("OKDemo", func(t *testing.T) {
		ch := check("demo")
		if !ch.Ready || ch.Fix != "" || ch.Stderr != "" {
			t.Fatalf("demo check = %+v, want ready", ch)
		}
		if s := step(t, ch, coordinator.StepCommand); !s.OK || !strings.Contains(s.Detail, os.Args[0]+" sparkles-test-agent") {
			t.Errorf("command step %+v", s)
		}
		if s := step(t, ch, coordinator.StepConfinement); s.Detail != "off" {
			t.Errorf("confinement step %+v, want off", s)
		}
		if s := step(t, ch, coordinator.StepInitialize); !s.OK || !strings.Contains(s.Detail, "protocol version 1") {
			t.Errorf("initialize step %+v", s)
		}
		for _, name := range []string{coordinator.StepAuth, coordinator.StepSessionNew, coordinator.StepReady} {
			if s := step(t, ch, name); !s.OK {
				t.Errorf("step %+v, want ok", s)
			}
		}
		if ents, _ := os.ReadDir(datadir.Dir(e.dir).Checks()); len(ents) != 0 {
			t.Errorf("the check left %d sandbox directories behind", len(ents))
		}
	})
	t.Run("OKWrapperScript", func(t *testing.T) {
		if ch := check("wrapper"); !ch.Ready {
			t.Fatalf("wrapper check = %+v, want ready", ch)
		}
	})
	t.Run("OKNodeScript", func(t *testing.T) {
		if _, ok := e.cfg.Agents["node"]; !ok {
			t.Skip("node is not installed")
		}
		ch := check("node")
		if !ch.Ready {
			t.Fatalf("node check = %+v, want ready", ch)
		}
		if s := step(t, ch, coordinator.StepInitialize); !strings.Contains(s.Detail, "loadSession yes") ||
			!strings.Contains(s.Detail, "images yes, audio no") || !strings.Contains(s.Detail, "http yes, sse no") {
			t.Errorf("initialize step %+v, want loadSession", s)
		}
		if s := step(t, ch, coordinator.StepAuth); !s.OK || !strings.Contains(s.Detail, "node-login") {
			t.Errorf("auth step %+v, want its method", s)
		}
	})
	t.Run("ExitBeforeInitialize", func(t *testing.T) {
		ch := check("boom")
		if ch.Ready {
			t.Fatal("a command that exits is ready")
		}
		if s := step(t, ch, coordinator.StepInitialize); s.OK || s.Detail != "the agent exited with status 3 before answering initialize" {
			t.Errorf("initialize step %+v", s)
		}
		if ch.Stderr != "boom\nthe key is [REDACTED]" {
			t.Errorf("stderr %q, want the agent's last lines, redacted", ch.Stderr)
		}
		if s := step(t, ch, coordinator.StepReady); s.OK {
			t.Errorf("ready step %+v", s)
		}
	})
	t.Run("MissingCommand", func(t *testing.T) {
		ch := check("missing")
		if ch.Ready || len(ch.Steps) != 1 || ch.Steps[0].OK || !strings.Contains(ch.Steps[0].Detail, "not found on the server's PATH") || !strings.Contains(ch.Fix, "install") {
			t.Fatalf("missing check = %+v, want the command not found and how to fix it", ch)
		}
	})
	t.Run("NeedsCredentials", func(t *testing.T) {
		ch := check("keyless")
		if ch.Ready {
			t.Fatal("an agent without its key is ready")
		}
		if s := step(t, ch, coordinator.StepAuth); s.OK || !strings.HasPrefix(s.Detail, "offers gemini-api-key; no credential in the environment") {
			t.Errorf("auth step %+v, want the methods and no credential seen", s)
		}
		if s := step(t, ch, coordinator.StepSessionNew); s.OK || !strings.Contains(s.Detail, "needs credentials") {
			t.Errorf("session/new step %+v", s)
		}
		if !strings.Contains(ch.Fix, "pass_env") {
			t.Errorf("fix %q, want where its key goes", ch.Fix)
		}
	})
	t.Run("CredentialsPresentButRefused", func(t *testing.T) {
		ch := check("wrongkey")
		s := step(t, ch, coordinator.StepAuth)
		if ch.Ready || s.OK || !strings.Contains(s.Detail, "credentials in the environment the registry gives it: GEMINI_API_KEY") || strings.Contains(s.Detail, "MODE") {
			t.Errorf("auth step %+v, want GEMINI_API_KEY named as present (and nothing else)", s)
		}
		if strings.Contains(s.Detail, "not-the-key") {
			t.Errorf("auth step %+v shows the key's value", s)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.co.CheckAgent(ctx, "nobody")
		if se, ok := errors.AsType[*sandbox.Error](err); !ok || se.Type != sandbox.ENotFound {
			t.Fatalf("err = %v, want %s", err, sandbox.ENotFound)
		}
	})
}
