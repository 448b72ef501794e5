package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		in := next(t, c)
		if got, want := in.Kind, Exited; got != want {
			t.Fatalf("kind = %v, want %v", got, want)
		}
		if !errors.Is(in.Err, ErrStopped) {
			t.Fatalf("Exited.Err = %v, want ErrStopped", in.Err)
		}
		if _, ok := <-c.Inbox(); ok {
			t.Fatal("inbox still open after Exited")
		}
		waitDone(t, c)
		if got, want := c.Err(), ErrStopped; got != want {
			t.Fatalf("Err = %v, want %v", got, want)
		}
	})

	t.Run("ErrEmptyCommand", func(t *testing.T) {
		_, err := Start(context.Background(), Config{Dir: t.TempDir()})
		if got, want := errString(err), "agent command is empty"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := Start(context.Background(), Config{
			Command: []string{"no-such-agent-here"},
			Dir:     t.TempDir(),
			Env:     []string{"PATH=" + t.TempDir()},
		})
		if got, want := errString(err), "agent command was not found"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})

	t.Run("ErrTimeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c, err := Start(ctx, testConfig(t, "silent", t.TempDir()))
		if got, want := errString(err), "agent did not start in time"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
		if c != nil {
			t.Fatal("got a Conn with the error")
		}
	})

	t.Run("ErrCanceledNoProcessLeft", func(t *testing.T) {
		// The agent starts a child in its group; the test cancels the boot
		// once both run, then checks that neither is left.
		pidFile := filepath.Join(t.TempDir(), "pids")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := testConfig(t, "silent", t.TempDir())
		cfg.Env = append(cfg.Env, "SPARKLES_TEST_PIDFILE="+pidFile)
		cfg.Stderr = &onWrite{f: cancel}
		_, err := Start(ctx, cfg)
		if got, want := errString(err), "agent start was canceled"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("agent did not record its pids: %v", err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			waitGone(t, pid)
		}
	})

	t.Run("ErrExited", func(t *testing.T) {
		_, err := Start(context.Background(), testConfig(t, "exit1", t.TempDir()))
		if got, want := errString(err), "agent stopped while starting: agent exited: exit status 1"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})

	t.Run("ErrRefused", func(t *testing.T) {
		_, err := Start(context.Background(), testConfig(t, "refuse", t.TempDir()))
		if got, want := errString(err), "agent refused to initialize"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})

	t.Run("ErrProtocolVersion", func(t *testing.T) {
		_, err := Start(context.Background(), testConfig(t, "oldproto", t.TempDir()))
		if got, want := errString(err), `agent speaks ACP version "7"; only version 1 is supported`; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})
}

func TestPrompt(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "README.md", "# Hello sandbox\n\nMore text.\n")
		c := MustStart(t, "demo", dir)
		if err := c.Prompt("turn_1", "hello there"); err != nil {
			t.Fatalf("Prompt: %v", err)
		}
		ins := until(t, c, PromptDone)
		got := strings.Join(summary(t, ins), "\n")
		want := strings.Join([]string{
			"agent_thought_chunk", "agent_thought_chunk", "agent_thought_chunk",
			"tool_call pending", "tool_call_update in_progress", "tool_call_update completed",
		}, "\n")
		if !strings.HasPrefix(got, want+"\nagent_message_chunk\nagent_message_chunk") {
			t.Fatalf("sequence:\n%s\nwant it to start with:\n%s\nand two or more message chunks", got, want)
		}
		done := ins[len(ins)-1]
		if got, want := done.TurnID, "turn_1"; got != want {
			t.Fatalf("TurnID = %q, want %q", got, want)
		}
		if got, want := done.StopReason, "end_turn"; got != want {
			t.Fatalf("StopReason = %q, want %q", got, want)
		}
		if done.Err != nil || len(done.Usage) == 0 {
			t.Fatalf("PromptDone Err = %v, Usage = %s", done.Err, done.Usage)
		}
		if got, want := messageText(t, ins), `You asked: "hello there". README.md begins with "# Hello sandbox". That is all from the demo agent.`; got != want {
			t.Fatalf("text = %q, want %q", got, want)
		}
		for _, in := range ins[:len(ins)-1] {
			u := parseUpdate(t, in)
			if u.Update.MessageID != nil {
				t.Fatalf("chunk carries a messageId: %s", in.Params)
			}
			if got, want := u.SessionID, c.SessionID(); got != want {
				t.Fatalf("sessionId = %q, want %q", got, want)
			}
		}
	})

	t.Run("MissingFile", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Prompt("turn_1", "read nothing.md please"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, c, PromptDone)
		// A missing file reads as empty, as Zed answers (agents such as
		// Gemini CLI read a file before they create it).
		if got, want := summary(t, ins)[5], "tool_call_update completed"; got != want {
			t.Fatalf("read tool: %q, want %q", got, want)
		}
		if got, want := ins[len(ins)-1].StopReason, "end_turn"; got != want {
			t.Fatalf("StopReason = %q, want %q", got, want)
		}
		if got := messageText(t, ins); !strings.Contains(got, "nothing.md is empty.") {
			t.Fatalf("text = %q", got)
		}
	})

	t.Run("Deterministic", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "README.md", "# Same\n")
		var runs [2][]string
		for i := range runs {
			c := MustStart(t, "demo", dir)
			if err := c.Prompt("turn_1", "write a note, env"); err != nil {
				t.Fatal(err)
			}
			first := until(t, c, Permission)
			if err := c.Respond(first[len(first)-1].Request, PermissionSelected("reject_once")); err != nil {
				t.Fatal(err)
			}
			for _, in := range append(first, until(t, c, PromptDone)...) {
				// Session ids are unique per session, on purpose: a later
				// process may load the session.
				params := strings.ReplaceAll(string(in.Params), c.SessionID(), "SESSION")
				runs[i] = append(runs[i], in.Kind.String()+" "+params+" "+in.StopReason+" "+string(in.Usage))
			}
			c.Close()
		}
		if got, want := strings.Join(runs[1], "\n"), strings.Join(runs[0], "\n"); got != want {
			t.Fatalf("second run differs:\n%s\nfirst:\n%s", got, want)
		}
	})

	t.Run("ErrPromptRunning", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Prompt("turn_1", "hang"); err != nil {
			t.Fatal(err)
		}
		if err := c.Prompt("turn_2", "hello"); err == nil {
			t.Fatal("second Prompt while one runs: no error")
		}
	})
}

func TestPermission(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome any
		tool    string
		written bool
		stop    string
	}{
		{"Allow", PermissionSelected("allow_once"), "completed", true, "end_turn"},
		{"Reject", PermissionSelected("reject_once"), "failed", false, "end_turn"},
		{"Cancelled", PermissionCancelled(), "failed", false, "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := MustStart(t, "demo", dir)
			if err := c.Prompt("turn_1", "please write out/answer.txt"); err != nil {
				t.Fatal(err)
			}
			ins := until(t, c, Permission)
			perm := ins[len(ins)-1]
			var p struct {
				ToolCall struct {
					ToolCallID string `json:"toolCallId"`
					Kind       string `json:"kind"`
				} `json:"toolCall"`
				Options []struct {
					OptionID string `json:"optionId"`
					Name     string `json:"name"`
					Kind     string `json:"kind"`
				} `json:"options"`
			}
			mustUnmarshal(t, perm.Params, &p)
			if got, want := p.ToolCall.Kind, "edit"; got != want {
				t.Fatalf("toolCall.kind = %q, want %q", got, want)
			}
			if got, want := len(p.Options), 3; got != want {
				t.Fatalf("%d options, want %d", got, want)
			}
			if got, want := p.Options[0].Kind+" "+p.Options[1].OptionID+" "+p.Options[2].Kind, "allow_always allow_once reject_once"; got != want {
				t.Fatalf("options = %q, want %q", got, want)
			}
			if tc.name == "Cancelled" {
				if err := c.Cancel(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Respond(perm.Request, tc.outcome); err != nil {
				t.Fatal(err)
			}
			ins = until(t, c, PromptDone)
			var status string
			for _, in := range ins {
				if in.Kind != Update {
					continue
				}
				if u := parseUpdate(t, in).Update; u.ToolCallID == p.ToolCall.ToolCallID && u.Status != "" {
					status = u.Status
				}
			}
			if got, want := status, tc.tool; got != want {
				t.Fatalf("edit tool status = %q, want %q", got, want)
			}
			if got, want := ins[len(ins)-1].StopReason, tc.stop; got != want {
				t.Fatalf("StopReason = %q, want %q", got, want)
			}
			_, err := os.Stat(filepath.Join(dir, "out", "answer.txt"))
			if got, want := err == nil, tc.written; got != want {
				t.Fatalf("file written = %v, want %v (%v)", got, want, err)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	for _, prompt := range []string{"hang", "slow"} {
		t.Run(strings.ToUpper(prompt[:1])+prompt[1:], func(t *testing.T) {
			c := MustStart(t, "demo", t.TempDir())
			if err := c.Prompt("turn_1", prompt); err != nil {
				t.Fatal(err)
			}
			for {
				if u := parseUpdate(t, next(t, c)); u.Update.SessionUpdate == "agent_message_chunk" {
					break
				}
			}
			if err := c.Cancel(); err != nil {
				t.Fatal(err)
			}
			ins := until(t, c, PromptDone)
			if got, want := ins[len(ins)-1].StopReason, "cancelled"; got != want {
				t.Fatalf("StopReason = %q, want %q", got, want)
			}
			// The session goes on after a cancelled turn.
			if err := c.Prompt("turn_2", "hello"); err != nil {
				t.Fatal(err)
			}
			ins = until(t, c, PromptDone)
			if got, want := ins[len(ins)-1].StopReason+" "+ins[len(ins)-1].TurnID, "end_turn turn_2"; got != want {
				t.Fatalf("next turn: %q, want %q", got, want)
			}
		})
	}
}

func TestCrash(t *testing.T) {
	c := MustStart(t, "demo", t.TempDir())
	if err := c.Prompt("turn_1", "crash"); err != nil {
		t.Fatal(err)
	}
	in := next(t, c)
	if got, want := in.Kind, Exited; got != want {
		t.Fatalf("kind = %v, want %v (no PromptDone for a crash)", got, want)
	}
	var exit *ExitError
	if !errors.As(in.Err, &exit) || exit.Code != 3 || in.Protocol {
		t.Fatalf("Exited = %+v, want exit code 3 and no protocol error", in)
	}
	if got, want := in.Err.Error(), "agent exited: exit status 3"; got != want {
		t.Fatalf("Err = %q, want %q", got, want)
	}
	waitDone(t, c)
	if got, want := c.Err(), in.Err; got != want {
		t.Fatalf("Err() = %v, want %v", got, want)
	}
	if err := c.Prompt("turn_2", "hello"); err == nil {
		t.Fatal("Prompt after exit: no error")
	}
}

func TestEscapedChild(t *testing.T) {
	// The agent exits but leaves a process outside its group holding its
	// output open: the connection still ends, after what was sent.
	pidFile := filepath.Join(t.TempDir(), "pid")
	c := MustStart(t, "escape", t.TempDir(), func(cfg *Config) {
		cfg.Env = append(cfg.Env, "SPARKLES_TEST_PIDFILE="+pidFile)
		cfg.StopGrace = 20 * time.Millisecond
	})
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ := strconv.Atoi(string(b))
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := c.Prompt("turn_1", "go"); err != nil {
		t.Fatal(err)
	}
	ins := append(until(t, c, PromptDone), next(t, c))
	if got, want := strings.Join(summary(t, ins), ","), "agent_message_chunk,done end_turn,exited"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := errString(ins[2].Err), "agent exited: exit status 0"; got != want {
		t.Fatalf("Err = %q, want %q", got, want)
	}
	waitDone(t, c)
}

func TestClose(t *testing.T) {
	t.Run("Concurrent", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { c.Close() })
		}
		wg.Wait()
		waitDone(t, c)
		if err := c.Cancel(); err == nil {
			t.Fatal("Cancel after Close: no error")
		}
	})

	t.Run("KillsStubbornAgent", func(t *testing.T) {
		c := MustStart(t, "stubborn", t.TempDir(), func(cfg *Config) { cfg.StopGrace = 50 * time.Millisecond })
		c.Close()
		waitDone(t, c)
		if got, want := c.Err(), ErrStopped; got != want {
			t.Fatalf("Err = %v, want %v", got, want)
		}
		waitGone(t, c.proc.pid)
	})

	t.Run("DoesNotWaitForConsumer", func(t *testing.T) {
		// Nobody reads the inbox while the agent floods it; Close must
		// still end the connection.
		c := MustStart(t, "flood", t.TempDir())
		if err := c.Prompt("turn_1", "go"); err != nil {
			t.Fatal(err)
		}
		next(t, c)
		c.Close()
		waitDone(t, c)
	})
}

func TestRespond(t *testing.T) {
	t.Run("ErrNoID", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Respond(RequestID{}, nil); err == nil {
			t.Fatal("Respond without an id: no error")
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// onWrite calls f on the first write.
type onWrite struct {
	once sync.Once
	f    func()
}

func (w *onWrite) Write(p []byte) (int, error) {
	w.once.Do(w.f)
	return len(p), nil
}

// waitGone waits for pid to be gone. A killed process closes its files a
// moment before it turns into a zombie, so the end of its output can come
// just before it is gone.
func waitGone(t testing.TB, pid int) {
	t.Helper()
	poll(t, fmt.Sprintf("process %d to end", pid), func() bool { return !alive(pid) })
}

// alive reports whether pid names a process that has not exited: a zombie
// waiting for its reaper counts as gone.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
