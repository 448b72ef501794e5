package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// EnvFloodAgent makes a process the flooding ACP agent of the peer
// scenario (RunFloodAgent). The child server starts its agents as its own
// command with this variable set in their environment.
const EnvFloodAgent = "SPARKLES_BENCH_FLOOD_AGENT"

// floodTools is how many tool calls a flooding turn cycles through: every
// update changes the title of one of them, so each is a tool.updated event
// while the turn's state stays a few tools long.
const floodTools = 16

// floodTitle is the size of a flooding update's title: the bench's event
// size.
const floodTitle = eventSize

// The prompts of a flooding turn. floodCycle's cycles through floodTools
// tool calls, updating each again and again; floodNew's announces a new
// tool call with every update, each already completed, as a long
// autonomous turn does (real agents announce each tool once), so that the
// turn's tools grow with its length.
const (
	floodCycle = "flood"
	floodNew   = "flood new-ids"
)

// floodUpdate is the tool_call update number i of a flooding turn, fresh
// when the turn announces a new tool call with every update.
func floodUpdate(i int, fresh bool) map[string]any {
	id, status := fmt.Sprintf("call_%d", i%floodTools), "in_progress"
	if fresh {
		id, status = fmt.Sprintf("call_%d", i), "completed"
	}
	title := fmt.Sprintf("step %d ", i)
	if pad := floodTitle - len(title); pad > 0 {
		title += strings.Repeat("x", pad)
	}
	return map[string]any{
		"sessionUpdate": "tool_call", "toolCallId": id,
		"title": title, "kind": "read", "status": status,
	}
}

// RunFloodAgent runs an ACP agent on in and out that answers initialize
// and session/new, and answers each session/prompt by sending tool_call
// session updates as fast as out takes them, until the client cancels the
// turn (session/cancel); it then answers the prompt "cancelled". The
// prompt floodNew makes every update a new tool call; any other cycles
// through floodTools of them. It returns
// when in ends. It is the peer scenario's producer: the real input path of
// a sandbox, from an agent's stdout through translation and group commit to
// the log.
func RunFloodAgent(ctx context.Context, in io.Reader, out io.Writer) error {
	a := &floodAgent{out: out}
	defer a.wg.Wait()
	defer a.stop()
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var m struct {
			ID     json.RawMessage `json:"id,omitempty"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" {
			continue // an answer, or not for us
		}
		var err error
		switch m.Method {
		case "initialize":
			err = a.reply(m.ID, map[string]any{
				"protocolVersion":   agent.ProtocolVersion,
				"agentCapabilities": map[string]any{"loadSession": false},
				"authMethods":       []any{},
				"agentInfo":         map[string]string{"name": "sparkles-bench-flood", "version": "1"},
			})
		case "session/new":
			err = a.reply(m.ID, map[string]string{"sessionId": "flood-session"})
		case "session/prompt":
			var p struct {
				Prompt []struct {
					Text string `json:"text"`
				} `json:"prompt"`
			}
			_ = json.Unmarshal(m.Params, &p)
			a.start(m.ID, len(p.Prompt) > 0 && p.Prompt[0].Text == floodNew)
		case "session/cancel":
			a.stop()
		default:
			if len(m.ID) > 0 {
				err = a.send(map[string]any{"jsonrpc": "2.0", "id": m.ID,
					"error": map[string]any{"code": -32601, "message": "method not found: " + m.Method}})
			}
		}
		if err != nil {
			return err
		}
	}
	return sc.Err()
}

type floodAgent struct {
	wmu sync.Mutex
	out io.Writer

	mu     sync.Mutex
	cancel chan struct{} // of the running turn; nil when none runs
	wg     sync.WaitGroup
}

// start floods updates on a goroutine of its own until stop, then answers
// the prompt of id; fresh makes each a new tool call.
func (a *floodAgent) start(id json.RawMessage, fresh bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		_ = a.send(map[string]any{"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": -32600, "message": "a prompt is already running"}})
		return
	}
	cancel := make(chan struct{})
	a.cancel = cancel
	a.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-cancel:
				_ = a.reply(id, map[string]string{"stopReason": "cancelled"})
				return
			default:
			}
			line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
				"sessionId": "flood-session", "update": floodUpdate(i, fresh),
			}})
			if a.write(append(line, '\n')) != nil {
				return
			}
		}
	})
}

// stop ends the running turn's flood, if any.
func (a *floodAgent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		close(a.cancel)
		a.cancel = nil
	}
}

func (a *floodAgent) reply(id json.RawMessage, result any) error {
	return a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *floodAgent) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.write(append(b, '\n'))
}

func (a *floodAgent) write(line []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, err := a.out.Write(line)
	return err
}

// startFloods starts a flooding turn of prompt (floodCycle or floodNew) in
// each sandbox of ids and records it in floods; it returns once every turn
// has started.
func startFloods(ctx context.Context, l *local, ids []string, prompt string, floods map[string]string) error {
	turns := make([]string, len(ids))
	err := parallel(ctx, len(ids), 32, func(ctx context.Context, i int) error {
		turn, err := l.coord.StartTurn(ctx, ids[i], prompt)
		turns[i] = turn.ID
		return err
	})
	for i, id := range ids {
		if turns[i] != "" {
			floods[id] = turns[i]
		}
	}
	return err
}

// stopFloods cancels the flooding turns and waits until each has
// completed.
func stopFloods(ctx context.Context, l *local, floods map[string]string) error {
	ids := make([]string, 0, len(floods))
	for id := range floods {
		ids = append(ids, id)
	}
	err := parallel(ctx, len(ids), 32, func(ctx context.Context, i int) error {
		turn := floods[ids[i]]
		head, err := l.store.Head(ids[i])
		if err != nil {
			return err
		}
		if _, err := l.coord.CancelTurn(ctx, ids[i], turn); err != nil {
			return err
		}
		return waitEventAfter(ctx, l.store, ids[i], head.LastEventID, turn, sandbox.TypeTurnCompleted)
	})
	clear(floods)
	return err
}
