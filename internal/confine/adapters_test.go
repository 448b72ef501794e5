//go:build linux

package confine_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/agentsuite"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

// TestAdaptersConfined: the real adapters, where they are installed (the
// conformance suite's npm packages, under the home, which the launcher
// covers), start confined and answer ACP's initialize: node finds its
// modules in the install dir, and the Rust binary of Codex runs.
func TestAdaptersConfined(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real adapters: not in -short")
	}
	bin := filepath.Join(agentsuite.Dir(), "node_modules", ".bin")
	l := newLauncher(t, confine.Options{})
	base := varTmp(t)

	t.Run("gemini --version", func(t *testing.T) {
		path := filepath.Join(bin, "gemini")
		if _, err := os.Stat(path); err != nil {
			t.Skip("gemini is not installed")
		}
		out, err := runConfined(t, l, sandboxDir(t, base, "gemini-version"), []string{"PATH=" + os.Getenv("PATH")}, path, "--version")
		if err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("gemini --version: %v\n%s", err, out)
		}
	})
	for _, a := range []struct{ name, bin string }{
		{"claude", "claude-agent-acp"},
		{"gemini", "gemini"},
		{"codex", "codex-acp"},
	} {
		t.Run(a.name, func(t *testing.T) {
			path := filepath.Join(bin, a.bin)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s is not installed", a.bin)
			}
			argv := []string{path}
			if a.name == "gemini" {
				argv = append(argv, "--experimental-acp")
			}
			sb := sandboxDir(t, base, a.name)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = filepath.Join(sb, "work")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			release, err := l.Start(cmd, sb, agent.Confinement{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait(); release() }()
			stdin.Write([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}` + "\n"))
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(stdout)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			deadline := time.After(60 * time.Second) // node adapters load many modules on a busy machine
			for {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("%s exited without answering initialize: %v\n%s", a.bin, cmd.Wait(), stderr.String())
					}
					if strings.Contains(line, `"id":0`) && strings.Contains(line, `"result"`) {
						return
					}
				case <-deadline:
					t.Fatalf("%s did not answer initialize\n%s", a.bin, stderr.String())
				}
			}
		})
	}
}
