package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestClientFromAnotherModule builds and tests a module of its own that
// depends on this one as docs/go-client.md says (a replace directive to a
// checkout), using client and sparklestest as an application's tests
// would.
func TestClientFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second module: not in -short")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.26\n\nrequire github.com/sparkles-dev/sparkles v0.0.0\n\nreplace github.com/sparkles-dev/sparkles => " + moduleDir + "\n",
		"app_test.go": `package app

import (
	"context"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

func TestApp(t *testing.T) {
	srv := sparklestest.Start(t)
	ctx := context.Background()
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.WriteFile(ctx, sb.ID, "hello.txt", stringsReader("hi"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
}
`,
		"reader_test.go": "package app\n\nimport \"strings\"\n\nfunc stringsReader(s string) *strings.Reader { return strings.NewReader(s) }\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"mod", "tidy"}, {"test", "-count=1", "./..."}} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v in a module that depends on this one: %v\n%s", args, err, out)
		}
	}
}
