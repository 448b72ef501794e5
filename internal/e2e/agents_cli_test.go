package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestAgentsFile starts serve with an agents file and --agent flags, lists
// the agents with `sparkles agents`, and runs a turn of an agent whose
// environment comes from the file.
func TestAgentsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agents.json")
	agents := map[string]any{"agents": map[string]any{
		"echo":    map[string]any{"command": binary, "args": []string{"agent", "demo"}, "env": map[string]string{"FROM_FILE": "file-value"}, "pass_env": []string{"FROM_SERVER"}},
		"missing": map[string]any{"command": filepath.Join(dir, "no-such-agent"), "env": map[string]string{"KEY": "never-listed-4242"}},
	}}
	b, _ := json.Marshal(agents)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "spk_agents_file_test_token"
	p := startServe(t, cliEnv(t, "FROM_SERVER=server-value"), filepath.Join(dir, "data"), token,
		"--agents-file", file, "--agent", `quoted='`+binary+`' agent demo`)
	p.waitServing()

	env := cliEnv(t, "SPARKLES_URL="+p.url, "SPARKLES_TOKEN="+token)
	res := run(t, env, "agents")
	if res.code != 0 {
		t.Fatalf("sparkles agents: %s", res)
	}
	for _, want := range []string{"demo     yes", "echo     yes", "missing  no", "quoted   yes"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("sparkles agents does not list %q:\n%s", want, res.stdout)
		}
	}
	res = run(t, env, "agents", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list) != 4 {
		t.Fatalf("sparkles agents --json: %v\n%s", err, res)
	}
	if strings.Contains(res.stdout, "never-listed-4242") || strings.Contains(res.stdout, binary) {
		t.Fatalf("the listing shows a command or env: %s", res.stdout)
	}

	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": "echo"}, http.StatusCreated, &sb)
	var turn sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "env"}, http.StatusAccepted, &turn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := openStream(ctx, p.streams, p.url, token, sb.ID, new(uint64))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := newSSEFrames(resp.Body)
	text := ""
	for {
		f, err := frames.next()
		if err != nil {
			t.Fatalf("stream ended before the turn completed: %v", err)
		}
		if f.event == string(sandbox.TypeMessageCompleted) {
			text = string(f.data)
		}
		if f.event == string(sandbox.TypeTurnCompleted) {
			break
		}
	}
	for _, want := range []string{"FROM_FILE=file-value", "FROM_SERVER=server-value"} {
		if !strings.Contains(text, want) {
			t.Errorf("the agent's environment lacks %s: %s", want, text)
		}
	}
}

func TestAgentsFileErrors(t *testing.T) {
	write := func(t *testing.T, content string) string {
		path := filepath.Join(t.TempDir(), "agents.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct{ name, file, want string }{
		{"UnknownField", `{"agents": {"claude": {"comand": "claude-agent-acp"}}}`, `agent "claude": unknown field "comand"`},
		{"MissingCommand", `{"agents": {"claude": {"args": []}}}`, `agent "claude": command is missing`},
		{"Syntax", "{\"agents\": {\n\"claude\": }}", "line 2, column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serveFails(t, tc.want, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--agents-file", write(t, tc.file))
		})
	}
	t.Run("NoFile", func(t *testing.T) {
		serveFails(t, "cannot read it", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--agents-file", filepath.Join(t.TempDir(), "none.json"))
	})
	t.Run("AgentQuoting", func(t *testing.T) {
		serveFails(t, "cannot split", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--agent", `x=agent "unterminated`)
	})
	t.Run("CommandLineNamesDataDir", func(t *testing.T) {
		// An agent never reaches the data dir: a registration whose
		// command line names it is refused at start, not at each boot.
		data := t.TempDir()
		serveFails(t, `agent "cat": the agent's command line names `+data+", which is in the data dir",
			"--addr", "127.0.0.1:0", "--data-dir", data, "--agent", "cat=/bin/cat "+data)
	})
	t.Run("MaxAgents", func(t *testing.T) {
		serveFails(t, "--max-agents 0: want at least 1", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--max-agents", "0")
	})
}
