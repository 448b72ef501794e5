package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

const logSecret = "sk-logs-test-secret-0123456789"

// failingAgent writes a shell script that prints what a real adapter prints
// when its files are out of reach, the sandbox's secret among it, and exits
// with code; it returns the agent that runs it.
func failingAgent(t *testing.T, code int) registry.Agent {
	t.Helper()
	script := filepath.Join(t.TempDir(), "adapter")
	body := fmt.Sprintf("#!/bin/sh\necho \"Error: Cannot find module '/opt/agents/claude/dist/index.js'\" >&2\necho \"the key was $API_KEY\" >&2\nexit %d\n", code)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return registry.Agent{Command: script}
}

// TestBootFailureSaysWhy: a boot that fails says in status_detail what
// happened and where the agent's output is, without a word of that
// output; the server's log has its end, redacted, with the sandbox id.
func TestBootFailureSaysWhy(t *testing.T) {
	for _, code := range []int{1, 127} {
		t.Run(fmt.Sprintf("OKStatus%d", code), func(t *testing.T) {
			var log syncbuf.Buffer
			e := newEnv(t, func(c *coordinator.Config) {
				c.Agents["adapter"] = failingAgent(t, code)
				c.Logger = slog.New(slog.NewJSONHandler(&log, nil))
			})
			sb := e.create(sandbox.CreateParams{Agent: "adapter", Secrets: map[string]string{"API_KEY": logSecret}})
			got := e.waitStatus(sb.ID, sandbox.StatusFailed)
			want := fmt.Sprintf("the agent exited with status %d before answering initialize; its output: `sparkles sandbox logs %s`", code, sb.ID)
			if got.StatusDetail != want {
				t.Fatalf("status_detail %q, want %q", got.StatusDetail, want)
			}
			evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxError))
			if d := evs[len(evs)-1].Data.(*sandbox.SandboxError); d.Code != sandbox.ErrAgentStartFailed || d.Message != want {
				t.Fatalf("sandbox.error = %+v, want %q", d, want)
			}
			var rec struct {
				Level, Msg, SandboxID, Stderr string
			}
			for line := range strings.Lines(log.String()) {
				var r struct {
					Level     string `json:"level"`
					Msg       string `json:"msg"`
					SandboxID string `json:"sandbox_id"`
					Stderr    string `json:"stderr"`
				}
				if json.Unmarshal([]byte(line), &r) == nil && r.Msg == "agent boot failed" {
					rec.Level, rec.Msg, rec.SandboxID, rec.Stderr = r.Level, r.Msg, r.SandboxID, r.Stderr
				}
			}
			if rec.Level != "WARN" || rec.SandboxID != sb.ID {
				t.Fatalf("no WARN record of the boot with the sandbox id in the log:\n%s", log.String())
			}
			if !strings.Contains(rec.Stderr, "Cannot find module '/opt/agents/claude/dist/index.js'") || !strings.Contains(rec.Stderr, "the key was [REDACTED]") {
				t.Fatalf("the logged stderr %q lacks the agent's last lines, redacted", rec.Stderr)
			}
			if strings.Contains(log.String(), logSecret) {
				t.Fatal("the server's log holds the sandbox's secret")
			}
		})
	}
}

// logOf is what Copy writes of sandbox id's agent log with o.
func logOf(t *testing.T, e *env, id string, o sandbox.LogOptions) string {
	t.Helper()
	l, err := e.co.AgentLog(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := l.Copy(context.Background(), &b, o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestAgentLog(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.Agents["adapter"] = failingAgent(t, 1) })
	sb := e.create(sandbox.CreateParams{Agent: "adapter", Secrets: map[string]string{"API_KEY": logSecret}})
	e.waitStatus(sb.ID, sandbox.StatusFailed)
	dir := datadir.Dir(e.dir).Sandbox(sb.ID)
	path := dir.AgentLog()
	// What a rotation left, and a line that names the sandbox's files.
	if err := os.WriteFile(path+".1", []byte("an older line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendLog(t, path, "wrote "+filepath.Join(dir.Work(), "notes.txt")+"\nno line break")

	t.Run("OK", func(t *testing.T) {
		want := "an older line\n" +
			"Error: Cannot find module '/opt/agents/claude/dist/index.js'\n" +
			"the key was [REDACTED]\n" +
			"wrote notes.txt\n" +
			"no line break"
		if got := logOf(t, e, sb.ID, sandbox.LogOptions{Tail: -1}); got != want {
			t.Fatalf("log:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("OKTail", func(t *testing.T) {
		if got, want := logOf(t, e, sb.ID, sandbox.LogOptions{Tail: 2}), "wrote notes.txt\nno line break"; got != want {
			t.Fatalf("tail 2: %q, want %q", got, want)
		}
		if got := logOf(t, e, sb.ID, sandbox.LogOptions{Tail: 100}); !strings.HasPrefix(got, "an older line\n") {
			t.Fatalf("tail 100: %q, want the whole log", got)
		}
		if got := logOf(t, e, sb.ID, sandbox.LogOptions{Tail: 0}); got != "" {
			t.Fatalf("tail 0: %q, want nothing", got)
		}
	})
	t.Run("OKFollow", func(t *testing.T) {
		l, err := e.co.AgentLog(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		caughtUp := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- l.Copy(ctx, pw, sandbox.LogOptions{Tail: 1, Follow: true, Flush: func() error {
				select {
				case caughtUp <- struct{}{}:
				default:
				}
				return nil
			}})
			pw.Close()
		}()
		<-caughtUp
		// The line without a break ends now, then the agent goes on; the
		// log rotates under the reader.
		appendLog(t, path, " after all\nthen "+logSecret+"\n")
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		appendLog(t, path, "in the new file\n")
		r := bufio.NewReader(pr)
		for _, want := range []string{"no line break after all\n", "then [REDACTED]\n", "in the new file\n"} {
			got, err := r.ReadString('\n')
			if err != nil || got != want {
				t.Fatalf("follow read %q, %v; want %q", got, err, want)
			}
		}
		cancel()
		go io.Copy(io.Discard, pr)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Copy: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the follow did not end with its context")
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.co.AgentLog(context.Background(), "c_00000000000000000000000000")
		if got, want := sandbox.ErrorType(err), sandbox.ENotFound; got != want {
			t.Fatalf("AgentLog of no sandbox: %v, want %s", err, want)
		}
	})
}

func appendLog(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
