package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// buildFaultAgent builds internal/faultagent, the misbehaving ACP agent.
func buildFaultAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "faultagent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sparkles-dev/sparkles/internal/faultagent").CombinedOutput()
	if err != nil {
		t.Fatalf("build faultagent: %v\n%s", err, out)
	}
	return bin
}

// streamUntil opens the stream of sandbox id from the start and reads
// frames until one satisfies done. It returns the open stream.
func streamUntil(t *testing.T, p *serveProc, id string, done func(frame) bool) *sseFrames {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := openStream(ctx, p.streams, p.url, p.token, id, new(uint64))
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	fr := newSSEFrames(resp.Body)
	timer := time.AfterFunc(30*time.Second, cancel)
	defer timer.Stop()
	for {
		f, err := fr.next()
		if err != nil {
			t.Fatalf("stream ended before the awaited frame: %v\n%s", err, p.logTail())
		}
		if done(f) {
			return fr
		}
	}
}

func isFrame(typ sandbox.Type) func(frame) bool {
	return func(f frame) bool { return f.event == string(typ) }
}

// TestGracefulShutdown stops the server with SIGTERM and with SIGINT while
// a turn runs and a subscriber is connected: the stream ends cleanly, the
// process exits 0, and the turn's end as canceled was durable before it did.
func TestGracefulShutdown(t *testing.T) {
	for name, sig := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT} {
		t.Run(name, func(t *testing.T) {
			dataDir := t.TempDir()
			env := cliEnv(t)
			p := startServe(t, env, dataDir, "shutdown-token")
			p.waitServing()
			var sb sandbox.Sandbox
			p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
			var turn sandbox.Turn
			p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hang"}, http.StatusAccepted, &turn)
			fr := streamUntil(t, p, sb.ID, isFrame(sandbox.TypeMessageUpdated))

			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			// The stream ends with the end of its body, not a cut
			// connection: the server ended it before stopping.
			var err error
			for err == nil {
				_, err = fr.next()
			}
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the stream ended with %v, want a clean end (EOF)", err)
			}
			if code := p.wait(); code != 0 {
				t.Fatalf("serve exited %d after %v, want 0:\n%s", code, sig, p.logTail())
			}

			p2 := startServe(t, env, dataDir, "shutdown-token")
			p2.waitServing()
			var done *sandbox.TurnCompleted
			for _, ev := range readEventLog(t, p2, sb.ID) {
				if d, ok := ev.Data.(*sandbox.SandboxError); ok && d.Code == sandbox.ErrCoordinatorRestarted {
					t.Fatalf("the restart found the turn open: it was not completed before the exit")
				}
				if d, ok := ev.Data.(*sandbox.TurnCompleted); ok && ev.TurnID == turn.ID {
					done = d
				}
			}
			if done == nil || done.Status != sandbox.TurnCanceled || done.Error == nil || done.Error.Code != sandbox.ErrServerStopped {
				t.Fatalf("turn.completed = %+v, want canceled with %s", done, sandbox.ErrServerStopped)
			}
			var got sandbox.Sandbox
			p2.mustCall(http.MethodGet, "/v1/sandboxes/"+sb.ID, nil, http.StatusOK, &got)
			if got.CurrentTurn != nil {
				t.Fatalf("the sandbox still has a current turn after a clean stop: %+v", got.CurrentTurn)
			}
			if code := p2.signal(syscall.SIGTERM); code != 0 {
				t.Fatalf("second run exited %d:\n%s", code, p2.logTail())
			}
		})
	}

	t.Run("AgentNotReading", func(t *testing.T) {
		// An agent that stopped reading its stdin holds every write to it:
		// stopping must not wait on one.
		bin := buildFaultAgent(t)
		dataDir := t.TempDir()
		env := cliEnv(t)
		p := startServe(t, env, dataDir, "shutdown-token", "--agent", "deaf="+bin+" deaf", "--default-agent", "deaf")
		p.waitServing()
		var sb sandbox.Sandbox
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
		var turn sandbox.Turn
		p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, &turn)
		// The chunk after the request means the read loop has handed the
		// request to a worker, whose 4 MiB answer fills the agent's pipe.
		streamUntil(t, p, sb.ID, func(f frame) bool { return bytes.Contains(f.data, []byte("Asked.")) })
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Fatalf("serve exited %d after SIGTERM:\n%s", code, p.logTail())
		}
		p2 := startServe(t, env, dataDir, "shutdown-token", "--agent", "deaf="+bin+" deaf")
		p2.waitServing()
		defer p2.signal(syscall.SIGTERM)
		var done *sandbox.TurnCompleted
		for _, ev := range readEventLog(t, p2, sb.ID) {
			if d, ok := ev.Data.(*sandbox.TurnCompleted); ok && ev.TurnID == turn.ID {
				done = d
			}
		}
		if done == nil || done.Status != sandbox.TurnCanceled {
			t.Fatalf("turn.completed = %+v, want canceled", done)
		}
	})
	t.Run("SecondSignal", func(t *testing.T) {
		// The agent ignores its closed stdin, so stopping it takes the
		// whole stop grace: the window for a second signal.
		bin := buildFaultAgent(t)
		dataDir := t.TempDir()
		p := startServe(t, cliEnv(t), dataDir, "shutdown-token", "--agent", "stubborn="+bin+" stubborn", "--default-agent", "stubborn")
		p.waitServing()
		var sb sandbox.Sandbox
		p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
		p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, nil)
		streamUntil(t, p, sb.ID, isFrame(sandbox.TypeMessageUpdated))
		killAgent(t, filepath.Join(dataDir, "sandboxes", sb.ID, "work", "agent.pid"))

		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.waitLog("shutting down")
		code := p.signal(syscall.SIGINT)
		if code == 0 {
			t.Fatalf("serve exited 0 after a second signal; want an immediate non-zero exit:\n%s", p.logTail())
		}
		if !strings.Contains(p.logTail(), "second signal") {
			t.Fatalf("serve did not say why it exited at once:\n%s", p.logTail())
		}
	})
}

// killAgent kills, when the test ends, the agent whose pid is in path: an
// agent that ignores its closed stdin outlives a server that exits at once.
func killAgent(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("agent pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("agent pid %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

// TestAgentEnvironment runs the server with its token in its environment:
// the demo agent's echo of its own environment must not contain it, nor
// any other variable of the server's.
func TestAgentEnvironment(t *testing.T) {
	const token = "server-env-token-9c41e7"
	const other = "unrelated-server-variable-51ab"
	env := cliEnv(t, "SPARKLES_TOKEN="+token, "SOME_SERVER_SECRET="+other)
	p := startServe(t, env, t.TempDir(), "")
	p.token = token
	p.waitServing()
	t.Cleanup(func() { p.signal(syscall.SIGTERM) })
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"env": map[string]string{"SANDBOX_VAR": "sandbox-value"}}, http.StatusCreated, &sb)
	var turn sandbox.Turn
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "show me your env"}, http.StatusAccepted, &turn)
	streamUntil(t, p, sb.ID, isFrame(sandbox.TypeTurnCompleted))

	var all strings.Builder
	var reply string
	for _, ev := range readEventLog(t, p, sb.ID) {
		b, _ := json.Marshal(ev)
		all.Write(b)
		if d, ok := ev.Data.(*sandbox.MessageCompleted); ok {
			reply = d.Text
		}
	}
	if !strings.Contains(reply, "SANDBOX_VAR=sandbox-value") || !strings.Contains(reply, "PATH=") {
		t.Fatalf("the demo agent did not echo its environment, so the test proves nothing: %q", reply)
	}
	for _, leak := range []string{token, other, "SPARKLES_"} {
		if strings.Contains(all.String(), leak) {
			t.Fatalf("%q from the server's environment reached the agent: %q", leak, reply)
		}
	}
}
