package coordinator_test

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

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// stopAgent is a builtin agent that asks permission in its turn and then
// waits for the turn to be stopped. It tells, in order, what reached it
// after its question: notifications by method, the answer to its question
// by outcome, "open" when its stdin was still open after both, and "eof".
// It answers the prompt cancelled once it has the cancel and the answer.
type stopAgent struct{ seen chan string }

func newStopAgent() *stopAgent { return &stopAgent{seen: make(chan string, 100)} }

func (a *stopAgent) run(_ context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
	in := bufio.NewReader(stdin)
	send := func(v any) {
		b, _ := json.Marshal(v)
		stdout.Write(append(b, '\n'))
	}
	var prompt json.RawMessage
	canceled, answered := false, false
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			a.seen <- "eof"
			return nil
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result struct {
				Outcome struct {
					Outcome string `json:"outcome"`
				} `json:"outcome"`
			} `json:"result"`
		}
		json.Unmarshal(line, &m)
		switch m.Method {
		case "initialize":
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"protocolVersion": 1}})
		case "session/new":
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"sessionId": "s1"}})
		case "session/prompt":
			prompt = m.ID
			send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1",
				"update": map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Write x.txt", "kind": "edit", "status": "pending"}}})
			send(map[string]any{"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission", "params": map[string]any{
				"sessionId": "s1",
				"toolCall":  map[string]any{"toolCallId": "call_1"},
				"options": []map[string]string{
					{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
					{"optionId": "no", "name": "Reject", "kind": "reject_once"},
				},
			}})
		case "":
			a.seen <- "answer " + m.Result.Outcome.Outcome
			answered = true
		default:
			a.seen <- m.Method
			canceled = canceled || m.Method == "session/cancel"
		}
		if canceled && answered && prompt != nil {
			a.seen <- stdinState(stdin)
			send(map[string]any{"jsonrpc": "2.0", "id": prompt, "result": map[string]any{"stopReason": "cancelled"}})
			prompt = nil
		}
	}
}

// stdinState tells, without waiting, whether the server still holds the
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

// record returns what the agent saw up to its stdin's end.
func (a *stopAgent) record(t *testing.T) []string {
	t.Helper()
	var got []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case s := <-a.seen:
			got = append(got, s)
			if s == "eof" {
				return got
			}
		case <-deadline:
			t.Fatalf("the agent's stdin never ended; it saw %q", got)
		}
	}
}

// TestStopSequence stops a sandbox's agent while its turn waits on an
// approval, in every way a running agent is stopped. Each time the agent
// gets session/cancel and its permission answered cancelled before its
// stdin closes, and the turn ends once, with its approval resolved once.
func TestStopSequence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tweak  func(*coordinator.Config)
		stop   func(e *env, sb sandbox.Sandbox, turnID string)
		status string
		code   string
	}{
		{name: "Delete", status: sandbox.TurnCanceled, stop: func(e *env, sb sandbox.Sandbox, _ string) {
			if _, err := e.co.DeleteSandbox(context.Background(), sb.ID); err != nil {
				e.t.Fatal(err)
			}
		}},
		// The server's stop says so in the turn's end; a turn the user
		// canceled before stays the user's plain cancel.
		{name: "Shutdown", status: sandbox.TurnCanceled, code: sandbox.ErrServerStopped, stop: func(e *env, _ sandbox.Sandbox, _ string) { e.co.Close() }},
		{name: "CanceledThenShutdown", status: sandbox.TurnCanceled, stop: func(e *env, sb sandbox.Sandbox, turnID string) {
			if _, err := e.co.CancelTurn(context.Background(), sb.ID, turnID); err != nil {
				e.t.Fatal(err)
			}
			e.co.Close()
		}},
		{
			name:   "TurnTimeout",
			tweak:  func(c *coordinator.Config) { c.TurnTimeout = 200 * time.Millisecond },
			status: sandbox.TurnFailed, code: sandbox.ErrTurnTimeout,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newStopAgent()
			e := newEnv(t, func(c *coordinator.Config) {
				c.Builtins = map[string]coordinator.BuiltinAgent{"recorder": a.run}
				if tc.tweak != nil {
					tc.tweak(c)
				}
			})
			sb := e.create(sandbox.CreateParams{Agent: "recorder"})
			turn, err := e.co.StartTurn(context.Background(), sb.ID, "write x.txt")
			if err != nil {
				t.Fatal(err)
			}
			e.waitFor(sb.ID, 0, isType(sandbox.TypeApprovalRequested))
			if tc.stop != nil {
				tc.stop(e, sb, turn.ID)
			}
			if got, want := a.record(t), []string{"session/cancel", "answer cancelled", "open", "eof"}; !slices.Equal(got, want) {
				t.Fatalf("the agent saw %q, want %q", got, want)
			}
			evs := e.waitFor(sb.ID, 0, turnCompleted(turn.ID))
			c := completed(evs)
			if c.Status != tc.status || (tc.code != "") != (c.Error != nil) || (c.Error != nil && c.Error.Code != tc.code) {
				t.Fatalf("turn.completed = %+v, want %s %s", c, tc.status, tc.code)
			}
			all := e.log(sb.ID)
			if got := strings.Count(types(all), string(sandbox.TypeTurnCompleted)); got != 1 {
				t.Fatalf("%d turn.completed, want 1; events %s", got, types(all))
			}
			var resolved []*sandbox.ApprovalResolved
			for _, ev := range all {
				if d, ok := ev.Data.(*sandbox.ApprovalResolved); ok {
					resolved = append(resolved, d)
				}
			}
			if len(resolved) != 1 || resolved[0].Decision != sandbox.DecisionCanceled {
				t.Fatalf("approval.resolved = %+v, want one, canceled", resolved)
			}
		})
	}
}

// log returns every event in the log of id now.
func (e *env) log(id string) []sandbox.Event {
	e.t.Helper()
	var out []sandbox.Event
	var after uint64
	for {
		recs, err := e.store.Read(context.Background(), id, after, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(recs) == 0 {
			return out
		}
		for _, r := range recs {
			ev, err := r.Decode()
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, ev)
			after = r.ID
		}
	}
}
