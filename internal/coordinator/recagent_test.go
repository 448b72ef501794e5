package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
)

// recAgent is a builtin agent that records what every run of it receives,
// so that a test can see each boot: initialize, then session/new or
// session/load with their params. It advertises loadSession unless
// noLoad; its session/load replays history (replayText, then a tool call)
// before it answers, or refuses with Gemini CLI's -32603 when failLoad.
// A prompt streams "answer to PROMPT" and ends the turn; a prompt with
// "hold" waits for hold to close first; "exit" ends the process at once.
// It counts the runs alive at once.
type recAgent struct {
	noLoad   bool
	failLoad bool
	hold     chan struct{}

	mu       sync.Mutex
	runs     [][]recCall // one per process, in start order
	sessions int
	alive    int
	maxAlive int
}

type recCall struct {
	Method string
	Params struct {
		SessionID  string            `json:"sessionId"`
		Cwd        string            `json:"cwd"`
		MCPServers []json.RawMessage `json:"mcpServers"`
	}
}

// replayText is what recAgent replays when it loads a session: history
// that must never become an event.
const replayText = "REPLAYED-HISTORY"

func newRecAgent() *recAgent {
	return &recAgent{hold: make(chan struct{})}
}

func (a *recAgent) note(f func()) {
	a.mu.Lock()
	f()
	a.mu.Unlock()
}

func (a *recAgent) run(ctx context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
	run := -1
	a.note(func() {
		a.alive++
		a.maxAlive = max(a.maxAlive, a.alive)
		a.runs = append(a.runs, nil)
		run = len(a.runs) - 1
	})
	defer a.note(func() { a.alive-- })
	var wmu sync.Mutex
	send := func(v map[string]any) {
		v["jsonrpc"] = "2.0"
		b, _ := json.Marshal(v)
		wmu.Lock()
		stdout.Write(append(b, '\n'))
		wmu.Unlock()
	}
	update := func(session string, u map[string]any) {
		send(map[string]any{"method": "session/update", "params": map[string]any{"sessionId": session, "update": u}})
	}
	var prompts sync.WaitGroup
	defer prompts.Wait()
	in := bufio.NewReader(stdin)
	session := ""
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return nil
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(line, &m) != nil || m.Method == "" {
			continue
		}
		c := recCall{Method: m.Method}
		json.Unmarshal(m.Params, &c.Params)
		a.note(func() { a.runs[run] = append(a.runs[run], c) })
		switch m.Method {
		case "initialize":
			send(map[string]any{"id": m.ID, "result": map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": !a.noLoad}}})
		case "session/new":
			a.note(func() { a.sessions++; session = fmt.Sprintf("rec-session-%d", a.sessions) })
			send(map[string]any{"id": m.ID, "result": map[string]any{"sessionId": session}})
		case "session/load":
			if a.failLoad {
				send(map[string]any{"id": m.ID, "error": map[string]any{"code": -32603, "message": "No previous sessions found for this project."}})
				continue
			}
			session = c.Params.SessionID
			update(session, map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]string{"type": "text", "text": replayText}})
			update(session, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": replayText}})
			update(session, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_old", "title": replayText, "kind": "read", "status": "completed"})
			send(map[string]any{"id": m.ID, "result": nil})
		case "session/prompt":
			var p struct {
				Prompt []struct {
					Text string `json:"text"`
				} `json:"prompt"`
			}
			json.Unmarshal(m.Params, &p)
			text := p.Prompt[0].Text
			if strings.Contains(text, "exit") {
				return nil
			}
			prompts.Add(1)
			go func() {
				defer prompts.Done()
				if strings.Contains(text, "hold") {
					select {
					case <-a.hold:
					case <-ctx.Done():
						return
					}
				}
				update(session, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": "answer to " + text}})
				send(map[string]any{"id": m.ID, "result": map[string]any{"stopReason": "end_turn"}})
			}()
		}
	}
}

// boots returns what each run received, in start order.
func (a *recAgent) boots() [][]recCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([][]recCall, len(a.runs))
	copy(out, a.runs)
	return out
}

func (a *recAgent) peak() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.maxAlive
}

// dropCounter is an observer that counts dropped updates by kind.
type dropCounter struct {
	coordinator.NopObserver
	mu      sync.Mutex
	dropped map[string]int
}

func (d *dropCounter) UpdatesDropped(kind string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropped == nil {
		d.dropped = map[string]int{}
	}
	d.dropped[kind] += n
}

func (d *dropCounter) count(kind string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped[kind]
}
