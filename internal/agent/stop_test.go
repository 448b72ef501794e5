package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// recordingAgent is an in-process agent that tells, in order, what reached
// it while it is stopped: each notification by method, each answer to one
// of its requests by id and outcome, "open" when its stdin was still open
// after the cancel and the answers it waits for, and "eof".
type recordingAgent struct {
	seen chan string
	// askFirst makes the agent ask permission as soon as the prompt
	// arrives; askLate makes it ask again once the cancel has come.
	askFirst, askLate bool
	// answer is the stopReason the agent answers the prompt with after the
	// cancel; "" leaves the prompt unanswered.
	answer string
}

func (a *recordingAgent) run(ctx context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
	in := bufio.NewReader(stdin)
	send := func(v any) {
		b, _ := json.Marshal(v)
		stdout.Write(append(b, '\n'))
	}
	read := func() (message, bool) {
		line, err := in.ReadBytes('\n')
		if err != nil {
			a.seen <- "eof"
			return message{}, false
		}
		var m message
		json.Unmarshal(line, &m)
		return m, true
	}
	ask := func(id string) {
		send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": map[string]any{
			"sessionId": "s1",
			"toolCall":  map[string]any{"toolCallId": "call_1", "title": "Write x.txt", "kind": "edit", "status": "pending"},
			"options":   []map[string]string{{"optionId": "yes", "name": "Allow", "kind": "allow_once"}},
		}})
	}
	var prompt json.RawMessage
	waiting := 0 // answers to permission requests not yet received
	canceled := false
	for {
		m, ok := read()
		if !ok {
			return nil
		}
		switch {
		case m.Method == "initialize":
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"protocolVersion": 1}})
		case m.Method == "session/new":
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"sessionId": "s1"}})
		case m.Method == "session/prompt":
			prompt = m.ID
			if a.askFirst {
				ask("perm-1")
				waiting++
			}
			send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1",
				"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "working"}}}})
		case m.Method != "":
			a.seen <- m.Method
			if m.Method == "session/cancel" {
				canceled = true
				if a.askLate {
					ask("perm-2")
					waiting++
				}
			}
		default:
			var r struct {
				Outcome struct {
					Outcome string `json:"outcome"`
				} `json:"outcome"`
			}
			json.Unmarshal(m.Result, &r)
			a.seen <- "answer " + strings.Trim(string(m.ID), `"`) + " " + r.Outcome.Outcome
			waiting--
		}
		if canceled && waiting == 0 && prompt != nil {
			a.seen <- stdinState(stdin)
			if a.answer != "" {
				send(map[string]any{"jsonrpc": "2.0", "id": prompt, "result": map[string]any{"stopReason": a.answer}})
			}
			prompt = nil
		}
	}
}

// stdinState tells, without waiting, whether the client still holds the
// agent's stdin open.
func stdinState(stdin io.Reader) string {
	f, ok := stdin.(*os.File)
	if !ok {
		return "unknown"
	}
	defer f.SetReadDeadline(time.Time{})
	f.SetReadDeadline(time.Now())
	var b [1]byte
	if _, err := f.Read(b[:]); errors.Is(err, os.ErrDeadlineExceeded) {
		return "open"
	}
	return "closed"
}

func (a *recordingAgent) start(t *testing.T, grace time.Duration) *Conn {
	t.Helper()
	a.seen = make(chan string, 100)
	return MustStart(t, "", t.TempDir(), func(cfg *Config) {
		cfg.Command = nil
		cfg.Run = a.run
		cfg.StopGrace = grace
	})
}

// record returns what the agent saw up to and including its stdin's end.
func (a *recordingAgent) record(t *testing.T) []string {
	t.Helper()
	var got []string
	for {
		select {
		case s := <-a.seen:
			got = append(got, s)
			if s == "eof" {
				return got
			}
		case <-time.After(waitLimit):
			t.Fatalf("the agent's stdin never ended; it saw %q", got)
		}
	}
}

// TestStop checks the stop sequence of ACP: session/cancel first, every
// pending permission request answered cancelled, the prompt's answer waited
// for, and only then the agent's stdin closed.
func TestStop(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		a := &recordingAgent{askFirst: true, askLate: true, answer: "cancelled"}
		c := a.start(t, waitLimit)
		if err := c.Prompt("turn_1", "go"); err != nil {
			t.Fatal(err)
		}
		until(t, c, Permission)
		c.Close()
		waitDone(t, c)
		got := a.record(t)
		if len(got) != 5 || got[0] != "session/cancel" || got[3] != "open" || got[4] != "eof" {
			t.Fatalf("the agent saw %q; want session/cancel, the answers, its stdin still open, then eof", got)
		}
		answers := slices.Sorted(slices.Values(got[1:3]))
		if want := []string{"answer perm-1 cancelled", "answer perm-2 cancelled"}; !slices.Equal(answers, want) {
			t.Fatalf("answers %q, want %q", answers, want)
		}
		if got, want := c.Err(), ErrStopped; got != want {
			t.Fatalf("Err = %v, want %v", got, want)
		}
	})

	t.Run("OKCancelOnce", func(t *testing.T) {
		// A turn cancelled by its user, then stopped: one cancel is enough.
		a := &recordingAgent{}
		c := a.start(t, 50*time.Millisecond)
		if err := c.Prompt("turn_1", "go"); err != nil {
			t.Fatal(err)
		}
		until(t, c, Update)
		if err := c.Cancel(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got, want := a.record(t), []string{"session/cancel", "open", "eof"}; !slices.Equal(got, want) {
			t.Fatalf("the agent saw %q, want %q", got, want)
		}
	})

	t.Run("OKUnansweredPrompt", func(t *testing.T) {
		// The agent never answers: the stop still ends, after the grace.
		a := &recordingAgent{askFirst: true}
		c := a.start(t, 50*time.Millisecond)
		if err := c.Prompt("turn_1", "go"); err != nil {
			t.Fatal(err)
		}
		until(t, c, Permission)
		c.Close()
		waitDone(t, c)
		if got, want := a.record(t), []string{"session/cancel", "answer perm-1 cancelled", "open", "eof"}; !slices.Equal(got, want) {
			t.Fatalf("the agent saw %q, want %q", got, want)
		}
	})

	t.Run("OKIdle", func(t *testing.T) {
		// Without a prompt there is nothing to cancel.
		a := &recordingAgent{}
		c := a.start(t, waitLimit)
		c.Close()
		if got, want := a.record(t), []string{"eof"}; !slices.Equal(got, want) {
			t.Fatalf("the agent saw %q, want %q", got, want)
		}
	})
}
