package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestSandboxLogsCommand: an agent that fails at boot, as an adapter whose
// files are out of reach does; the sandbox says where its output is, and
// `sparkles sandbox logs` shows it, redacted, whole, its tail, and
// followed.
func TestSandboxLogsCommand(t *testing.T) {
	const secret = "sk-cli-logs-secret-0123456789"
	script := filepath.Join(t.TempDir(), "adapter")
	body := "#!/bin/sh\necho \"Error: Cannot find module '/opt/agents/claude/dist/index.js'\" >&2\necho \"key $API_KEY\" >&2\nexit 1\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := sparklestest.Start(t, sparklestest.WithAgent("adapter", script))
	ctx := testCtx(t)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Agent: "adapter", Secrets: map[string]string{"API_KEY": secret}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	s := srv.Client.Stream(ctx, id, client.StreamOptions{Since: client.Since(0)})
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Event.Type == sandbox.TypeSandboxError {
			break
		}
	}
	s.Close()
	got, err := srv.Client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.StatusDetail, "exited with status 1") || !strings.Contains(got.StatusDetail, "`sparkles sandbox logs "+id+"`") ||
		strings.Contains(got.StatusDetail, "Cannot find module") {
		t.Fatalf("status_detail %q: want the exit status and the logs command, not the agent's output", got.StatusDetail)
	}

	t.Logf("status_detail: %s", got.StatusDetail)
	r := mustRun(t, srv.URL, "sandbox", "logs", id)
	if want := "Error: Cannot find module '/opt/agents/claude/dist/index.js'\nkey [REDACTED]\n"; r.out != want {
		t.Fatalf("sandbox logs:\n%s\nwant:\n%s", r.out, want)
	}
	if r = mustRun(t, srv.URL, "sandbox", "logs", id, "--tail", "1"); r.out != "key [REDACTED]\n" {
		t.Fatalf("sandbox logs --tail 1: %q", r.out)
	}

	t.Run("OKFollow", func(t *testing.T) {
		pr, pw := io.Pipe()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		app := newApp()
		app.Writer, app.ErrWriter = pw, io.Discard
		done := make(chan error, 1)
		go func() {
			done <- app.RunContext(runCtx, []string{"sparkles", "sandbox", "logs", "--url", srv.URL, "--token", sparklestest.DefaultToken, id, "-f"})
			pw.Close()
		}()
		f, err := os.OpenFile(datadir.Dir(srv.DataDir).Sandbox(id).AgentLog(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("written later\n")
		f.Close()
		br := bufio.NewReader(pr)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("the follow ended (%v) before the line written later", err)
			}
			if line == "written later\n" {
				break
			}
		}
		cancel()
		go io.Copy(io.Discard, pr)
		if err := <-done; err != nil {
			t.Fatalf("interrupted follow: %v, want a normal end", err)
		}
	})
	t.Run("ErrStreamToken", func(t *testing.T) {
		_, err := runCLI(t, srv.URL, "", "sandbox", "logs", id, "--token", sb.StreamToken)
		if err == nil || !strings.Contains(err.Error(), "the token may not do this") {
			t.Fatalf("logs with a stream token: %v", err)
		}
	})
}
