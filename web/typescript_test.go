package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
		out, err := runTSC(t, node, tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", wrong)
		if err == nil || !strings.Contains(out, "Property 'txt' does not exist on type 'MessageCompletedData'") {
			t.Fatalf("tsc accepted a wrong use of the declarations (%v):\n%s", err, out)
		}
	})
}
