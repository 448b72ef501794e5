package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// checkNodeAgent is just enough ACP for a boot, as a Node adapter speaks it.
const checkNodeAgent = `const rl = require("readline").createInterface({input: process.stdin});
rl.on("line", (line) => {
  const m = JSON.parse(line);
  let result;
  if (m.method === "initialize") result = {protocolVersion: 1, agentCapabilities: {}, authMethods: []};
  else if (m.method === "session/new") result = {sessionId: "n1"};
  else return;
  process.stdout.write(JSON.stringify({jsonrpc: "2.0", id: m.id, result}) + "\n");
});
`

// checkNodeKeyedAgent wants ACME_API_KEY to be "good" before it opens a
// session, as an adapter checks its model key.
const checkNodeKeyedAgent = `const rl = require("readline").createInterface({input: process.stdin});
rl.on("line", (line) => {
  const m = JSON.parse(line);
  let answer;
  if (m.method === "initialize") answer = {result: {protocolVersion: 1, agentCapabilities: {}, authMethods: [{id: "acme-api-key", name: "Acme API key"}]}};
  else if (m.method === "session/new") answer = process.env.ACME_API_KEY === "good" ? {result: {sessionId: "k1"}} : {error: {code: -32000, message: "Authentication required"}};
  else return;
  process.stdout.write(JSON.stringify({jsonrpc: "2.0", id: m.id, ...answer}) + "\n");
});
`

// TestAgentsCheckCommand checks agents on a server that confines them, as
// serve does by default: the demo agent and a Node adapter registered as
// `node script.js` are ready (exit 0); a wrapper script that execs an
// adapter beside it, which no command line names, is not, and the check
// says how it ended and which grant fixes it (exit 1); an adapter whose
// key is wrong says it needs credentials, names the variable it was given
// (not its value) and where a key goes.
func TestAgentsCheckCommand(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is needed to check a Node adapter")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := write("index.js", checkNodeAgent)
	write("adapter", "#!/bin/sh\nexec node \"$(dirname \"$0\")/index.js\"\n")
	wrapper := write("wrapper", "#!/bin/sh\necho wrapper starting >&2\nexec \"$(dirname \"$0\")/adapter\"\n")
	keyed := write("keyed.js", checkNodeKeyedAgent)
	srv := sparklestest.Start(t, sparklestest.WithAgent("node", node, script), sparklestest.WithAgent("wrapped", wrapper),
		sparklestest.WithRegisteredAgent("keyed", sparklestest.Agent{Command: node, Args: []string{keyed}, Env: map[string]string{"ACME_API_KEY": "wrong-0123456789"}}))

	r, err := runCheck(t, srv.URL, "demo", "node")
	if err != nil {
		t.Fatalf("agents check demo node: %v\n%s%s", err, r.out, r.err)
	}
	for _, want := range []string{"demo: ready in", "node: ready in", "ok  confinement  landlock", "ok  grants       read-only: " + script, "ok  initialize   protocol version 1"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("agents check demo node: no %q in:\n%s", want, r.out)
		}
	}

	r, err = runCheck(t, srv.URL, "--json")
	if code, _ := exitStatus(err); code != 1 {
		t.Fatalf("agents check of every agent exits %d (%v), want 1:\n%s", code, err, r.out)
	}
	var checks []client.AgentCheck
	if err := json.Unmarshal([]byte(r.out), &checks); err != nil || len(checks) != 4 {
		t.Fatalf("agents check --json: %v\n%s", err, r.out)
	}
	wrapped := checks[3]
	if wrapped.Name != "wrapped" || wrapped.Ready || !strings.Contains(wrapped.Stderr, "wrapper starting") || !strings.Contains(wrapped.Fix, "--agent-read-path") {
		t.Fatalf("check of the wrapper = %+v, want not ready, its stderr and the grant that fixes it", wrapped)
	}
	r, _ = runCheck(t, srv.URL, "wrapped")
	for _, want := range []string{"wrapped: NOT READY", "FAIL  initialize", "before answering initialize", "its stderr ended with:\n    wrapper starting", "fix: if its files"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("agents check wrapped: no %q in:\n%s", want, r.out)
		}
	}
	t.Log(r.out)

	r, err = runCheck(t, srv.URL, "keyed")
	if code, _ := exitStatus(err); code != 1 {
		t.Fatalf("agents check keyed exits %d (%v), want 1:\n%s", code, err, r.out)
	}
	for _, want := range []string{"keyed: NOT READY", "confinement  landlock", "FAIL  auth", "offers acme-api-key; credentials in the environment the registry gives it: ACME_API_KEY", "needs credentials", "fix: give it its key"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("agents check keyed: no %q in:\n%s", want, r.out)
		}
	}
	if strings.Contains(r.out, "wrong-0123456789") {
		t.Errorf("agents check keyed shows the key's value:\n%s", r.out)
	}
}

// runCheck runs `sparkles agents check` with args against the server at url.
func runCheck(t *testing.T, url string, args ...string) (cliRun, error) {
	t.Helper()
	var out, errw bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errw
	argv := append([]string{"sparkles", "agents", "check", "--url", url, "--token", sparklestest.DefaultToken}, args...)
	err := app.Run(argv)
	return cliRun{out.String(), errw.String()}, err
}
