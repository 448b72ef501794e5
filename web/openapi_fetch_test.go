package web_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sparklestest"
)

// The OpenAPI client packages .ci/run installs beside the TypeScript
// compiler; the docs' example names the same versions.
const (
	openapiTypescriptVersion = "7.13.0"
	openapiFetchVersion      = "0.17.0"
)

// TestOpenAPIFetchExample runs the docs' openapi-fetch example as a reader
// would: types generated from server/openapi.json with openapi-typescript,
// the example compiled with tsc in strict mode against them, then run under
// Node against a server with the demo agent. It must print the demo's
// answer and end: an example that reads the log before the turn wrote
// anything prints nothing, and one the types refuse does not compile.
func TestOpenAPIFetchExample(t *testing.T) {
	node, tsc, types := typescript(t)
	modules := filepath.Dir(types)
	for pkg, want := range map[string]string{"openapi-typescript": openapiTypescriptVersion, "openapi-fetch": openapiFetchVersion} {
		var meta struct{ Version string }
		b, err := os.ReadFile(filepath.Join(modules, pkg, "package.json"))
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil || meta.Version != want {
			msg := "%s@%s is not in %s (.ci/run installs it there): %v, version %q"
			if inCI() {
				t.Fatalf(msg, pkg, want, modules, err, meta.Version)
			}
			t.Skipf(msg+"; skipping", pkg, want, modules, err, meta.Version)
		}
	}
	src, install := openapiFetchExample(t)
	for _, pin := range []string{"openapi-typescript@" + openapiTypescriptVersion, "openapi-fetch@" + openapiFetchVersion} {
		if !strings.Contains(install, pin) {
			t.Errorf("the docs install other versions than the test's %s:\n%s", pin, install)
		}
	}

	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gen := exec.CommandContext(ctx, node, filepath.Join(modules, "openapi-typescript", "bin", "cli.js"),
		filepath.Join("..", "server", "openapi.json"), "-o", filepath.Join(dir, "sparkles-api.d.ts"))
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("openapi-typescript: %v\n%s", err, out)
	}
	srv := sparklestest.Start(t)
	src = strings.ReplaceAll(src, "http://127.0.0.1:7410", srv.URL)
	files := map[string]string{
		"example.ts":   src,
		"package.json": `{"type": "module"}`,
		"tsconfig.json": `{"compilerOptions": {"target": "es2022", "module": "nodenext", "moduleResolution": "nodenext",
			"strict": true, "skipLibCheck": true, "types": ["node"], "typeRoots": [` + jsonString(types) + `]}, "files": ["example.ts"]}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := runTSC(t, node, tsc, "-p", dir); err != nil {
		t.Fatalf("tsc: the docs' openapi-fetch example does not compile against the generated types: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, node, filepath.Join(dir, "example.js"))
	run.Env = append(os.Environ(), "SPARKLES_TOKEN="+srv.Token)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node example.js: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `You asked: "hello"`) {
		t.Fatalf("the example printed %q, want the demo agent's answer to hello", out)
	}
}

// openapiFetchExample returns the ```ts block of the docs that imports
// openapi-fetch, and the ```sh block before it that installs the packages.
func openapiFetchExample(t *testing.T) (src, install string) {
	t.Helper()
	pages, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	pages = append(pages, filepath.Join("..", "README.md"))
	block := regexp.MustCompile("(?s)```(sh|ts)\n(.*?)```")
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var lastSh string
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			if m[1] == "sh" {
				lastSh = m[2]
				continue
			}
			if strings.Contains(m[2], `from "openapi-fetch"`) {
				return m[2], lastSh
			}
		}
	}
	t.Fatal("no ```ts block of README.md or docs/ imports openapi-fetch")
	return "", ""
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
