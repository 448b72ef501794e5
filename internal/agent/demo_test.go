package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestDemoEnv(t *testing.T) {
	// The server's own environment must not reach the agent.
	t.Setenv("SPARKLES_TOKEN", "tok-server-secret")
	c := MustStart(t, "demo", t.TempDir(), func(cfg *Config) {
		cfg.Env = append(cfg.Env, "FOO=bar", "API_KEY=sk-sandbox-secret")
	})
	if err := c.Prompt("turn_1", "show env"); err != nil {
		t.Fatal(err)
	}
	ins := until(t, c, PromptDone)
	want := []string{agentVar + "=demo", "GORACE=atexit_sleep_ms=0", "FOO=bar", "API_KEY=sk-sandbox-secret"}
	text := messageText(t, ins)
	if !strings.Contains(text, "My environment: "+strings.Join(want, " ")+".") {
		t.Fatalf("text = %q, want the exact environment %q", text, want)
	}
	if strings.Contains(text, "tok-server-secret") {
		t.Fatal("the server's SPARKLES_TOKEN reached the agent")
	}
	var found bool
	for _, in := range ins {
		if in.Kind != Update {
			continue
		}
		u := parseUpdate(t, in).Update
		if u.SessionUpdate != "tool_call" || u.Title != "Read the environment" {
			continue
		}
		var input struct{ Env []string }
		mustUnmarshal(t, u.RawInput, &input)
		if got, want := strings.Join(input.Env, "\n"), strings.Join(want, "\n"); got != want {
			t.Fatalf("rawInput env = %q, want %q", got, want)
		}
		found = true
	}
	if !found {
		t.Fatal("no environment tool call")
	}
}

func TestParsePrompt(t *testing.T) {
	for _, tc := range []struct {
		text string
		want demoPlan
	}{
		{"hello", demoPlan{read: "README.md"}},
		{"read docs/guide.md", demoPlan{read: "docs/guide.md", named: true}},
		// Asked to write, it reads that file first, as real agents do.
		{"please write out/answer.txt.", demoPlan{read: "out/answer.txt", write: "out/answer.txt"}},
		{"Write a note", demoPlan{read: "notes.txt", write: "notes.txt"}},
		{"read a.md, then write b.md", demoPlan{read: "a.md", named: true, write: "b.md"}},
		{"write ../escape.txt", demoPlan{read: "../escape.txt", write: "../escape.txt"}},
		{"show env, slowly", demoPlan{read: "README.md", env: true}},
		{"slow", demoPlan{read: "README.md", slow: true}},
		{"Hang!", demoPlan{read: "README.md", hang: true}},
		{"crash", demoPlan{read: "README.md", crash: true}},
		{"plan, then write notes.txt", demoPlan{read: "notes.txt", write: "notes.txt", todo: true}},
		{"usage, write notes.txt", demoPlan{read: "notes.txt", write: "notes.txt", usage: true}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			if got := parsePrompt(tc.text); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRunDemo runs the demo agent in-process over pipes, for what the
// process tests cannot see: its return values.
func TestRunDemo(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		p := startDemo(t)
		p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false}}}}`)
		if got, want := p.recv()["result"].(map[string]any)["protocolVersion"], float64(1); got != want {
			t.Fatalf("protocolVersion = %v, want %v", got, want)
		}
		p.send(`{"jsonrpc":"2.0","id":"s","method":"session/new","params":{"cwd":"/sandbox","mcpServers":[]}}`)
		sid, _ := p.recv()["result"].(map[string]any)["sessionId"].(string)
		if !demoSessionRe().MatchString(sid) {
			t.Fatalf("sessionId = %q, want demo-session-<16 hex digits>", sid)
		}
		p.send(`{"jsonrpc":"2.0","id":9,"method":"no/such","params":{}}`)
		if got, want := p.recv()["error"].(map[string]any)["code"], float64(codeMethodNotFound); got != want {
			t.Fatalf("code = %v, want %v", got, want)
		}
		// Without file access advertised, the read tool fails on its own.
		p.send(`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
		for {
			m := p.recv()
			if m["method"] == "fs/read_text_file" {
				t.Fatal("read a file the client does not share")
			}
			if m["id"] == float64(1) {
				if got, want := m["result"].(map[string]any)["stopReason"], "end_turn"; got != want {
					t.Fatalf("stopReason = %v, want %v", got, want)
				}
				break
			}
		}
		p.in.Close()
		if err := p.wait(); err != nil {
			t.Fatalf("RunDemo = %v, want nil at the end of its input", err)
		}
	})

	t.Run("ErrCrash", func(t *testing.T) {
		p := startDemo(t)
		p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`)
		p.recv()
		p.send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/sandbox","mcpServers":[]}}`)
		sid, _ := p.recv()["result"].(map[string]any)["sessionId"].(string)
		p.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"crash"}]}}`)
		if err := p.wait(); !errors.Is(err, ErrCrash) {
			t.Fatalf("RunDemo = %v, want ErrCrash", err)
		}
		p.in.Close()
	})
}

type demoPipe struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

func startDemo(t *testing.T) *demoPipe {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &demoPipe{t: t, in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := RunDemo(context.Background(), inR, outW, []string{"A=1"})
		outW.Close()
		p.done <- err
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return p
}

func (p *demoPipe) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

func (p *demoPipe) recv() map[string]any {
	p.t.Helper()
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		p.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatal(err)
	}
	return m
}

func (p *demoPipe) wait() error {
	p.t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(waitLimit):
		p.t.Fatal("RunDemo did not return")
	}
	return nil
}

// TestInProcess drives agents given as Config.Run: the same client, over real
// pipes, with no process.
func TestInProcess(t *testing.T) {
	start := func(t *testing.T, run func(context.Context, io.Reader, io.Writer, []string) error) *Conn {
		t.Helper()
		return MustStart(t, "", t.TempDir(), func(cfg *Config) {
			cfg.Command = nil
			cfg.Env = []string{"ONLY=this"}
			cfg.Run = run
		})
	}

	t.Run("OK", func(t *testing.T) {
		c := start(t, RunDemo)
		if err := c.Prompt("turn_1", "env"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, c, PromptDone)
		if got, want := ins[len(ins)-1].StopReason, "end_turn"; got != want {
			t.Fatalf("StopReason = %q, want %q", got, want)
		}
		if got := messageText(t, ins); !strings.Contains(got, "My environment: ONLY=this.") {
			t.Fatalf("text = %q", got)
		}
	})

	t.Run("Crash", func(t *testing.T) {
		c := start(t, RunDemo)
		if err := c.Prompt("turn_1", "crash"); err != nil {
			t.Fatal(err)
		}
		in := next(t, c)
		if got, want := errString(in.Err), "agent exited: exit status 3"; got != want || in.Kind != Exited {
			t.Fatalf("%v %q, want Exited %q", in.Kind, got, want)
		}
	})

	t.Run("CloseWhileHanging", func(t *testing.T) {
		c := start(t, RunDemo)
		if err := c.Prompt("turn_1", "hang"); err != nil {
			t.Fatal(err)
		}
		until(t, c, Update)
		c.Close()
		waitDone(t, c)
		if got, want := c.Err(), ErrStopped; got != want {
			t.Fatalf("Err = %v, want %v", got, want)
		}
	})

	t.Run("Panic", func(t *testing.T) {
		_, err := Start(context.Background(), Config{
			Dir: t.TempDir(),
			Run: func(context.Context, io.Reader, io.Writer, []string) error { panic("boom") },
		})
		if got, want := errString(err), "agent stopped while starting: agent exited: exit status 2"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})

	t.Run("ErrTimeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := Start(ctx, Config{
			Dir: t.TempDir(),
			Run: func(ctx context.Context, _ io.Reader, _ io.Writer, _ []string) error {
				<-ctx.Done()
				return ctx.Err()
			},
		})
		if got, want := errString(err), "agent did not start in time"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})
}

// TestDemoWords checks that every word the help lists steers the agent.
func TestDemoWords(t *testing.T) {
	plain := parsePrompt("hello")
	for _, w := range DemoWords {
		prompt := strings.Replace(w.Word, "NAME", "docs/x.md", 1)
		if got := parsePrompt(prompt); got == plain {
			t.Errorf("%q (listed as %q) does not change what the demo agent does", prompt, w.Word)
		}
	}
}

// TestDemoFirstRun runs the README's first prompts in a new, empty
// sandbox: every tool succeeds and the reply says why there was nothing to
// read.
func TestDemoFirstRun(t *testing.T) {
	t.Run("Write", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Prompt("turn_1", "hello, please write notes.txt"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, c, Permission)
		if err := c.Respond(ins[len(ins)-1].Request, PermissionSelected("allow_once")); err != nil {
			t.Fatal(err)
		}
		ins = append(ins, until(t, c, PromptDone)...)
		var tools []string
		for _, in := range ins {
			if in.Kind != Update {
				continue
			}
			if u := parseUpdate(t, in).Update; u.Status == "completed" || u.Status == "failed" {
				tools = append(tools, u.ToolCallID+" "+u.Status)
			}
		}
		if got, want := strings.Join(tools, ", "), "call_1 completed, call_2 completed"; got != want {
			t.Fatalf("tools ended %s, want %s", got, want)
		}
		if got, want := messageText(t, ins), `You asked: "hello, please write notes.txt". notes.txt is new or empty. I wrote notes.txt. That is all from the demo agent.`; got != want {
			t.Fatalf("text = %q, want %q", got, want)
		}
	})
	t.Run("Hello", func(t *testing.T) {
		c := MustStart(t, "demo", t.TempDir())
		if err := c.Prompt("turn_1", "hello"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, c, PromptDone)
		if got, want := summary(t, ins)[5], "tool_call_update completed"; got != want {
			t.Fatalf("read tool: %q, want %q", got, want)
		}
		if got := messageText(t, ins); !strings.Contains(got, `README.md is empty. A new sandbox has no files: ask me to write one, e.g. "write notes.txt".`) {
			t.Fatalf("text = %q", got)
		}
	})
}

// TestDemoSlowPause runs a slow reply on synctest's clock: it takes its
// 100 pauses of the pace given, RunDemo's by default.
func TestDemoSlowPause(t *testing.T) {
	for _, tt := range []struct {
		name  string
		pause time.Duration
		want  time.Duration
	}{
		{"Default", 0, 100 * DefaultSlowPause},
		{"Person", DemoPersonSlowPause, 100 * DemoPersonSlowPause},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inR, inW := io.Pipe()
				outR, outW := io.Pipe()
				done := make(chan error, 1)
				go func() { done <- Demo{SlowPause: tt.pause}.Run(context.Background(), inR, outW, nil) }()
				p := &demoPipe{t: t, in: inW, out: bufio.NewReader(outR), done: done}
				p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`)
				p.recv()
				// The demo keeps its sessions in its cwd: a real directory.
				cwd, _ := json.Marshal(t.TempDir())
				p.send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":` + string(cwd) + `,"mcpServers":[]}}`)
				session, _ := json.Marshal(p.recv()["result"].(map[string]any)["sessionId"])
				start := time.Now()
				p.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":` + string(session) + `,"prompt":[{"type":"text","text":"slow"}]}}`)
				for p.recv()["id"] != float64(2) {
				}
				if got := time.Since(start); got != tt.want {
					t.Fatalf("the slow reply took %v of the bubble's clock, want %v", got, tt.want)
				}
				inW.Close()
				if err := <-done; err != nil {
					t.Fatalf("Run = %v, want nil at the end of its input", err)
				}
			})
		})
	}
}
