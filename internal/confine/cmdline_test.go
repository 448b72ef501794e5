//go:build linux

package confine_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

// TestCommandLineGrants: an agent registered as an interpreter and a
// script outside the system directories (`/bin/sh …/script.sh
// --config=…`, `node …/node_modules/…/index.js`) runs confined: the paths
// its command line names are readable, and nothing beside them. A command
// line naming a directory that holds the data dir does not start, and
// says which argument. As root, and again as nobody.
func TestCommandLineGrants(t *testing.T) {
	testCommandLineGrants(t)
	alsoAsNobody(t, "TestCommandLineGrants")
}

func testCommandLineGrants(t *testing.T) {
	base := varTmp(t)
	write := func(p, body string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write(filepath.Join(base, "outside", "beside.txt"), "beside")
	script := write(filepath.Join(base, "outside", "script.sh"),
		"echo script-ran\ncat \"${1#--config=}\"\nif cat "+secret+" 2>/dev/null; then echo read-beside; fi\n")
	conf := write(filepath.Join(base, "conf", "agent.toml"), "config-read\n")
	data := filepath.Join(base, "data")
	os.MkdirAll(data, 0o700)
	l := newLauncher(t, confine.Options{DataDir: data})
	env := []string{"PATH=/usr/bin:/bin"}

	t.Run("sh script", func(t *testing.T) {
		out, err := runConfined(t, l, sandboxDir(t, data, "c_script"), env, "/bin/sh", script, "--config="+conf)
		if err != nil || !strings.Contains(out, "script-ran\nconfig-read\n") || strings.Contains(out, "read-beside") {
			t.Fatalf("confined: %v\n%s", err, out)
		}
	})

	t.Run("node script", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("node is not installed")
			}
			t.Skip("node is not installed")
		}
		nm := filepath.Join(base, "agents", "node_modules")
		index := write(filepath.Join(nm, "@acme", "agent", "dist", "index.js"),
			"console.log(require('dep').word + ' ' + require('fs').readFileSync(process.argv[2], 'utf8').trim())\n")
		write(filepath.Join(nm, "dep", "index.js"), "exports.word = 'dep-loaded'\n")
		out, err := runConfined(t, l, sandboxDir(t, data, "c_node"), env, node, index, conf)
		if err != nil || !strings.Contains(out, "dep-loaded config-read") {
			t.Fatalf("confined: %v\n%s", err, out)
		}
	})

	// As the coordinator boots a registry entry ({"command": "/bin/sh",
	// "args": [wrapper, agent]}): through agent.Start, to an open session.
	t.Run("registry entry", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		wrapper := write(filepath.Join(base, "wrapper", "run.sh"), "exec \"$1\"\n")
		sb := sandboxDir(t, data, "c_registry")
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := agent.Start(ctx, agent.Config{
			Command:  []string{"/bin/sh", wrapper, exe},
			Dir:      filepath.Join(sb, "work"),
			Env:      append([]string{demoVar + "=1"}, env...),
			Logger:   slog.New(slog.DiscardHandler),
			Launcher: l,
			Sandbox:  sb,
		})
		if err != nil {
			t.Fatalf("agent.Start: %v", err)
		}
		c.Close()
		<-c.Done()
	})

	t.Run("refused", func(t *testing.T) {
		sb := sandboxDir(t, data, "c_refused")
		cmd := exec.Command("/bin/sh", script, base)
		cmd.Dir = filepath.Join(sb, "work")
		release, err := l.Start(cmd, sb, agent.Confinement{})
		if err == nil {
			cmd.Wait()
			release()
			t.Fatal("started an agent whose command line names a directory holding the data dir")
		}
		if !strings.Contains(err.Error(), base+", which contains "+data) {
			t.Errorf("Start: %v, want it to name %s and the data dir", err, base)
		}
	})
}
