package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sparklestest"
)

// typescriptVersion is the TypeScript compiler .ci/run installs (with
// @types/node for the Node example) into SPARKLES_TYPESCRIPT_DIR.
const typescriptVersion = "5.9.3"

// typescript returns node and the tsc script of the pinned compiler, and
// the folder of the type packages installed beside it. Without it the test
// is skipped, except in CI.
func typescript(t *testing.T) (node, tsc, types string) {
	t.Helper()
	dir := os.Getenv("SPARKLES_TYPESCRIPT_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "sparkles", "typescript")
	}
	skip := func(format string, args ...any) {
		t.Helper()
		if inCI() {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+"; skipping the TypeScript check", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed")
	}
	tsc = filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	out, err := exec.Command(node, tsc, "--version").Output()
	if err != nil {
		skip("no TypeScript compiler in %s (.ci/run installs typescript@%s there): %v", dir, typescriptVersion, err)
	}
	if got := strings.TrimSpace(string(out)); got != "Version "+typescriptVersion {
		skip("%s has TypeScript %q, want %s", dir, got, typescriptVersion)
	}
	return node, tsc, filepath.Join(dir, "node_modules", "@types")
}

func runTSC(t *testing.T, node, tsc string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, append([]string{tsc}, args...)...).CombinedOutput()
	return string(out), err
}

// TestTypeScript checks sparkles-events.d.ts, and the TypeScript example
// and the Node backend script that use it, with tsc --noEmit (tsconfig.json
// here), and that the check catches a wrong use of the declarations.
func TestTypeScript(t *testing.T) {
	node, tsc, types := typescript(t)

	t.Run("OK", func(t *testing.T) {
		if out, err := runTSC(t, node, tsc, "-p", ".", "--typeRoots", types); err != nil {
			t.Fatalf("tsc -p web: %v\n%s", err, out)
		}
	})

	t.Run("RealEvents", func(t *testing.T) {
		fixture := realEventsFixture(t)
		if out, err := runTSC(t, node, tsc, tsArgs(fixture)...); err != nil {
			t.Fatalf("the server's real events do not type-check against sparkles-events.d.ts: %v\n%s", err, out)
		}
		// The check has teeth: a field the declarations do not name fails.
		b, err := os.ReadFile(fixture)
		if err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(string(b), `"data":{`, `"data":{"undocumented":1,`, 1)
		if err := os.WriteFile(fixture, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := runTSC(t, node, tsc, tsArgs(fixture)...); err == nil || !strings.Contains(out, "undocumented") {
			t.Fatalf("tsc accepted an event with a field the declarations do not name (%v):\n%s", err, out)
		}
	})

	t.Run("ErrWrongUse", func(t *testing.T) {
		abs, err := filepath.Abs("sparkles-events.js")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		wrong := filepath.Join(dir, "wrong.mts")
		src := "import { SandboxEventStream } from " + strconv.Quote(filepath.ToSlash(abs)) + ";\n" +
			`new SandboxEventStream({ sandboxId: "c_x", onEvent(ev) { if (ev.type === "message.completed") { ev.data.txt; } } });` + "\n"
		if err := os.WriteFile(wrong, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runTSC(t, node, tsc, tsArgs(wrong)...)
		if err == nil || !strings.Contains(out, "Property 'txt' does not exist on type 'MessageCompletedData'") {
			t.Fatalf("tsc accepted a wrong use of the declarations (%v):\n%s", err, out)
		}
	})
}

func tsArgs(file string) []string {
	return []string{"--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", file}
}

// realEventsFixture runs turns on a real server with the demo agent (an
// approval, a crash) and writes what it answered into a TypeScript module
// whose values are typed with the declarations: every frame of the stream
// (snapshot, sandbox.status and each durable type), a sandbox and a turn.
// Object literals get excess property checks, so tsc fails on a field the
// declarations lack as on a value or a field they have wrong.
func realEventsFixture(t *testing.T) string {
	t.Helper()
	srv := sparklestest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(method, path, body string) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, b, err)
		}
		return b
	}
	var sb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(call(http.MethodPost, "/v1/sandboxes", `{"metadata":{"from":"typescript_test"},"tool_output":true}`), &sb); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/sandboxes/"+sb.ID+"/events/stream?since=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	var frames []string
	// next reads frames until one of type typ, and returns its envelope.
	next := func(typ string) map[string]any {
		t.Helper()
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			frames = append(frames, data)
			var env map[string]any
			if err := json.Unmarshal([]byte(data), &env); err != nil {
				t.Fatal(err)
			}
			if env["type"] == typ {
				return env
			}
		}
		t.Fatalf("the stream ended before a %s frame: %v", typ, sc.Err())
		return nil
	}
	next("snapshot")
	var turn struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(call(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"please write notes.txt, with a plan, its output and usage"}`), &turn); err != nil {
		t.Fatal(err)
	}
	appr := next("approval.requested")["data"].(map[string]any)["approval_id"].(string)
	call(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/approvals/"+appr, `{"decision":"approve"}`)
	next("turn.completed")
	call(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"crash"}`)
	next("sandbox.error")
	next("turn.completed")
	// The crash stops the agent in the commit of that turn.completed, and a
	// stream writes the status after the events of a commit. It is the one
	// status frame every run has: the agent may be ready before the stream
	// opens, and then none comes before.
	if st := next("sandbox.status")["data"].(map[string]any)["status"]; st != "stopped" {
		t.Fatalf("the status after the crash is %v, want stopped", st)
	}
	types := map[string]bool{}
	for _, f := range frames {
		var env struct{ Type string }
		_ = json.Unmarshal([]byte(f), &env)
		types[env.Type] = true
	}
	for _, typ := range []string{"snapshot", "sandbox.status", "turn.started", "turn.completed", "message.updated", "message.completed", "tool.updated", "approval.requested", "approval.resolved", "sandbox.error", "tool.output", "turn.usage"} {
		if !types[typ] {
			t.Fatalf("the run produced no %s frame", typ)
		}
	}
	abs, err := filepath.Abs("sparkles-events.js")
	if err != nil {
		t.Fatal(err)
	}
	src := "import type { SandboxEvent, Sandbox, Turn } from " + strconv.Quote(filepath.ToSlash(abs)) + ";\n" +
		"export const frames: SandboxEvent[] = [\n" + strings.Join(frames, ",\n") + "\n];\n" +
		"export const sandbox: Sandbox = " + string(call(http.MethodGet, "/v1/sandboxes/"+sb.ID, "")) + ";\n" +
		"export const turn: Turn = " + string(call(http.MethodGet, "/v1/sandboxes/"+sb.ID+"/turns/"+turn.ID, "")) + ";\n"
	file := filepath.Join(t.TempDir(), "events.mts")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
