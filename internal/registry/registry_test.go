package registry_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/registry"
)

func TestParseFlag(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		for _, tc := range []struct {
			flag string
			argv []string
		}{
			{"gemini=gemini --acp", []string{"gemini", "--acp"}},
			{"x=  /opt/my agent/bin  ", []string{"/opt/my", "agent/bin"}},
			{`x='/opt/my agent/bin' --name "two words"`, []string{"/opt/my agent/bin", "--name", "two words"}},
			{`x=/opt/my\ agent/bin --q='it'\''s' --dq="say \"hi\""`, []string{"/opt/my agent/bin", "--q=it's", `--dq=say "hi"`}},
			{`x=agent --glob='*.go' --brace="{a,b}" '~/x' "$HOME"`, nil}, // refused below: "$HOME" expands
			{`x=agent --glob='*.go' --brace="{a,b}" '~/x' '$HOME' --eq=a=b`, []string{"agent", "--glob=*.go", "--brace={a,b}", "~/x", "$HOME", "--eq=a=b"}},
		} {
			name, a, err := registry.ParseFlag(tc.flag)
			if tc.argv == nil {
				if err == nil {
					t.Errorf("%s: parsed as %q, want an error", tc.flag, a.Argv())
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", tc.flag, err)
				continue
			}
			if got, want := a.Argv(), tc.argv; name != strings.Split(tc.flag, "=")[0] || !slices.Equal(got, want) {
				t.Errorf("%s: %s %q, want %q", tc.flag, name, got, want)
			}
		}
	})
	t.Run("Err", func(t *testing.T) {
		for _, tc := range []struct{ flag, want string }{
			{"noequals", "want NAME=COMMAND"},
			{"=cmd", "want NAME=COMMAND"},
			{"x=   ", "want NAME=COMMAND"},
			{"bad name=cmd", `the name "bad name"`},
			{`x=agent "unterminated`, "cannot split"},
			{`x=agent | tee log`, "cannot split"},
			{`x=agent; rm -rf x`, "cannot split"},
			{`x=agent > log`, "cannot split"},
			{`x=agent $HOME`, "expansion"},
			{"x=agent `id`", "expansion"},
			{`x=agent $(id)`, "expansion"},
			{`x=agent "$HOME/x"`, "expansion"},
			{`x=agent *.go`, `unquoted "*"`},
			{`x=agent {a,b}`, `unquoted "{"`},
			{`x=~/bin/agent`, "leading ~"},
			{`x=bin/agent --acp`, "relative path"},
			{`x=''`, "command is empty"},
		} {
			_, a, err := registry.ParseFlag(tc.flag)
			if err == nil {
				t.Errorf("%s: parsed as %q, want an error with %q", tc.flag, a.Argv(), tc.want)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("%s: error %q, want one line with %q", tc.flag, msg, tc.want)
			}
		}
	})
}

func TestParse(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		r, err := registry.Parse([]byte(`{"agents": {
			"claude": {"command": "claude-agent-acp", "args": [],
			           "env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "NODE_OPTIONS": "--max-old-space-size=512"},
			           "pass_env": ["ANTHROPIC_API_KEY"]},
			"gemini": {"command": "/opt/gemini cli/gemini", "args": ["--acp", "two words"],
			           "network": "loopback", "read_paths": ["/opt/gemini cli"], "write_paths": ["/var/cache/g"]},
			"local": {"command": "x", "host_ports": [4000, 11434]}
		}}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Names(), []string{"claude", "gemini", "local"}; !slices.Equal(got, want) {
			t.Fatalf("names %q, want %q", got, want)
		}
		g := r["gemini"]
		if got, want := g.Argv(), []string{"/opt/gemini cli/gemini", "--acp", "two words"}; !slices.Equal(got, want) {
			t.Errorf("argv %q, want %q", got, want)
		}
		// Stored for the launcher, which is where they take effect.
		if g.Network != "loopback" || !slices.Equal(g.ReadPaths, []string{"/opt/gemini cli"}) || !slices.Equal(g.WritePaths, []string{"/var/cache/g"}) || !g.Confined() {
			t.Errorf("confinement settings %+v not kept", g)
		}
		if l := r["local"]; !slices.Equal(l.HostPorts, []int{4000, 11434}) || !l.Confined() {
			t.Errorf("host_ports %+v not kept", l)
		}
		// The operator is trusted: what a sandbox's env refuses, the
		// registry's may set.
		if got := r["claude"].Env["NODE_OPTIONS"]; got != "--max-old-space-size=512" {
			t.Errorf("NODE_OPTIONS = %q", got)
		}
	})
	t.Run("Err", func(t *testing.T) {
		for _, tc := range []struct{ name, file, want string }{
			{"Syntax", "{\"agents\": {\n  \"a\": {\"command\": \"x\",}\n}}", "line 2, column"},
			{"Truncated", `{"agents": {"a": {"command": "x"}`, "ends too early"},
			{"NotObject", `[]`, "must be a JSON object"},
			{"NoAgents", `{}`, `no "agents" object`},
			{"TopUnknown", `{"agent": {}}`, `unknown field "agent" at the top`},
			{"AgentsNotObject", `{"agents": []}`, `"agents" must be an object`},
			{"UnknownField", `{"agents": {"claude": {"comand": "x"}}}`, `agent "claude": unknown field "comand"; an agent has command, args`},
			{"MissingCommand", `{"agents": {"claude": {"args": ["x"]}}}`, `agent "claude": command is missing`},
			{"RelativeCommand", `{"agents": {"claude": {"command": "./claude"}}}`, `agent "claude": command "./claude" is a relative path`},
			{"ArgsType", `{"agents": {"claude": {"command": "x", "args": "--acp"}}}`, `agent "claude": args: want a list of strings, not a JSON string`},
			{"EnvType", `{"agents": {"claude": {"command": "x", "env": {"A": 1}}}}`, `agent "claude": env: want an object of string values, not a JSON number`},
			{"EnvKey", `{"agents": {"claude": {"command": "x", "env": {"A=B": "1"}}}}`, `agent "claude": env key "A=B" is not a variable name`},
			{"PassEnvName", `{"agents": {"claude": {"command": "x", "pass_env": ["OK", "NOT OK"]}}}`, `agent "claude": pass_env[1] "NOT OK" is not a variable name`},
			{"AgentNotObject", `{"agents": {"claude": "claude-agent-acp"}}`, `agent "claude": must be an object with command`},
			{"Twice", `{"agents": {"claude": {"command": "x"}, "claude": {"command": "y"}}}`, `agent "claude" is defined twice`},
			{"BadName", `{"agents": {"my agent": {"command": "x"}}}`, `agent name "my agent"`},
			{"EmptyPath", `{"agents": {"claude": {"command": "x", "write_paths": [""]}}}`, `agent "claude": write_paths[0] is empty`},
			{"HostPort", `{"agents": {"claude": {"command": "x", "host_ports": [4000, 0]}}}`, `agent "claude": host_ports[1] 0: want a TCP port from 1 to 65535`},
			{"HostPortType", `{"agents": {"claude": {"command": "x", "host_ports": ["4000"]}}}`, `agent "claude": host_ports: want a list of port numbers, not a JSON string`},
			{"Trailing", `{"agents": {}} {}`, "after the JSON value"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := registry.Parse([]byte(tc.file))
				if err == nil {
					t.Fatalf("parsed, want an error with %q", tc.want)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
					t.Fatalf("error %q, want one line with %q", msg, tc.want)
				}
			})
		}
	})
	t.Run("LoadNamesTheFile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agents.json")
		if _, err := registry.Load(path); err == nil || !strings.Contains(err.Error(), "agents file "+path+": cannot read it") {
			t.Fatalf("missing file: %v", err)
		}
		if err := os.WriteFile(path, []byte(`{"agents": {"a": {}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := registry.Load(path); err == nil || !strings.HasPrefix(err.Error(), "agents file "+path+`: agent "a": command is missing`) {
			t.Fatalf("bad file: %v", err)
		}
	})
}

// TestEnviron checks the registry's part of the precedence: pass_env wins
// over env, and a pass_env variable the server lacks leaves env's value.
func TestEnviron(t *testing.T) {
	a := registry.Agent{
		Command: "x",
		Env:     map[string]string{"A": "env", "B": "env", "C": "env"},
		PassEnv: []string{"B", "C", "D", "E"},
	}
	server := map[string]string{"B": "server", "D": "server", "UNLISTED": "server"}
	got := a.Environ(func(k string) (string, bool) { v, ok := server[k]; return v, ok })
	want := map[string]string{"A": "env", "B": "server", "C": "env", "D": "server"}
	if len(got) != len(want) {
		t.Fatalf("environ %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("environ %v, want %v", got, want)
		}
	}
}

func TestAvailable(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "my-agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(noexec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "/nonexistent")
	for _, tc := range []struct {
		name string
		a    registry.Agent
		want bool
	}{
		{"AbsolutePath", registry.Agent{Command: bin}, true},
		{"NotExecutable", registry.Agent{Command: noexec}, false},
		{"Missing", registry.Agent{Command: filepath.Join(dir, "gone")}, false},
		{"NotOnServerPATH", registry.Agent{Command: "my-agent"}, false},
		// The server starts the agent from its own PATH, whatever a PATH
		// in the agent's env says: the answer must say the same.
		{"OnlyOnRegistryPATH", registry.Agent{Command: "my-agent", Env: map[string]string{"PATH": "/nonexistent:" + dir}}, false},
	} {
		if got := tc.a.Available(); got != tc.want {
			t.Errorf("%s: available %v, want %v", tc.name, got, tc.want)
		}
	}
	t.Setenv("PATH", dir)
	if !(registry.Agent{Command: "my-agent"}).Available() {
		t.Error("a name on the server's PATH is not available")
	}
}
