package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agentsuite"
	"github.com/sparkles-dev/sparkles/internal/fakemodel"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestAgentResume runs the real Claude Code adapter against the fake
// Anthropic API and checks that the conversation survives what stops the
// agent: after an idle stop and after a restart of the server, the model
// is sent the earlier turns with the new prompt (the adapter loaded its
// session), and no session_lost is logged. It skips without the adapter,
// as the conformance suite does, and fails under CI=true.
func TestAgentResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real adapter through three turns and a restart")
	}
	var a agentsuite.Adapter
	for _, x := range agentsuite.All() {
		if x.Name == "claude" {
			a = x
		}
	}
	dir := agentsuite.Dir()
	argv, ok := a.Command(dir)
	if !ok {
		msg := fmt.Sprintf("%s is not installed in %s: npm install --prefix %s %s (or run .ci/run; SPARKLES_AGENTS_DIR picks another folder)", a.Package, dir, dir, a.Package)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	script := &fakemodel.Script{}
	model := httptest.NewServer(a.Model(script))
	t.Cleanup(model.Close)
	env, secrets, err := a.Setup(model.URL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	t.Cleanup(func() { killStrays(t, dataDir) })
	const token = "spk_resume_test_token_0123456789"
	args := []string{"--boot-timeout", "90s", "--agent-idle-timeout", "2s", "--agent", a.Name + "=" + strings.Join(argv, " ")}
	p := startServe(t, cliEnv(t), dataDir, token, args...)
	p.waitServing()
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": a.Name, "env": env, "secrets": secrets}, http.StatusCreated, &sb)
	rec := newRecorder(t, sb.ID, token)
	rec.follow(p)
	s := &scenarioRun{t: t, p: p, rec: rec, id: sb.ID}

	prompts := []string{
		"remember the word marmalade",
		"which word did I ask you to remember",
		"and which word was that again",
	}
	turn := func(i int) {
		t.Helper()
		s.p = p
		id := s.startTurn(prompts[i])
		if d := s.completed(id); d.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn %d: %s (%+v); agent log:\n%s", i+1, d.Status, d.Error, agentLog(dataDir, sb.ID))
		}
		// The turn's own request to the model must carry every earlier
		// prompt: the conversation the agent remembers.
		body := turnRequest(t, script, prompts[i])
		for _, earlier := range prompts[:i] {
			if !strings.Contains(body, earlier) {
				t.Fatalf("turn %d: the model was not sent the earlier prompt %q; the agent forgot the conversation. Request:\n%.2000s", i+1, earlier, body)
			}
		}
	}

	turn(0)
	waitStopped(t, p, token, sb.ID)
	turn(1) // booted again after the idle stop

	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM", code)
	}
	p = startServe(t, cliEnv(t), dataDir, token, args...)
	p.waitServing()
	rec.follow(p)
	turn(2) // booted again after the restart

	for _, ev := range readEventLog(t, p, sb.ID) {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			t.Errorf("sandbox.error %s: %s", d.Code, d.Message)
		}
	}
}

// turnRequest returns the body of the model request of the turn prompted
// with prompt: the last one of the conversation (not a side request) whose
// last prompt it is.
func turnRequest(t *testing.T, script *fakemodel.Script, prompt string) string {
	t.Helper()
	body := ""
	for _, r := range script.Requests() {
		if !r.Side && strings.Contains(r.Conv.Prompt, prompt) {
			body = string(r.Body)
		}
	}
	if body == "" {
		t.Fatalf("the model got no request for %q", prompt)
	}
	return body
}

// waitStopped waits until the sandbox's agent has stopped, reading the
// sandbox.status frames of its stream (or the snapshot, if it already had).
func waitStopped(t *testing.T, p *serveProc, token, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := openStream(ctx, p.streams, p.url, token, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := newSSEFrames(resp.Body)
	for {
		f, err := frames.next()
		if err != nil {
			t.Fatalf("the agent did not stop while idle: %v", err)
		}
		var status string
		switch f.event {
		case "snapshot":
			var d struct {
				Data struct {
					Sandbox sandbox.Sandbox `json:"sandbox"`
				} `json:"data"`
			}
			_ = json.Unmarshal(f.data, &d)
			status = d.Data.Sandbox.Status
		case string(sandbox.TypeSandboxStatus):
			var d struct {
				Data sandbox.SandboxStatus `json:"data"`
			}
			_ = json.Unmarshal(f.data, &d)
			status = d.Data.Status
		}
		if status == sandbox.StatusStopped {
			return
		}
	}
}

func agentLog(dataDir, id string) string {
	b, _ := os.ReadFile(filepath.Join(dataDir, "sandboxes", id, "agent.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
