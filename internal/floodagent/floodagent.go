// Package floodagent is an ACP agent that floods its turns with large tool
// calls, as a hostile agent filled a sandbox's event log until the disk
// was full: the tests of the log's byte bound run it as a builtin agent
// (in-process, over pipes). A prompt "tools N SIZE" announces N tool
// calls, each with 100 locations whose paths are SIZE bytes long, and
// ends the turn; N of 0 goes on until the turn is canceled or the agent
// stopped. Anything else ends the turn at once.
package floodagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Locations is how many locations each tool call names: the most a tool
// call keeps (translate).
const Locations = 100

// Run speaks ACP on stdin and stdout until stdin closes or ctx ends.
func Run(ctx context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
	var (
		wmu    sync.Mutex
		broken bool
	)
	// send writes one message and reports whether the client still reads.
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		wmu.Lock()
		defer wmu.Unlock()
		if !broken {
			_, err = stdout.Write(append(b, '\n'))
			broken = err != nil
		}
		return !broken
	}
	answer := func(id json.RawMessage, result any) {
		send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	}
	var (
		turns    sync.WaitGroup
		mu       sync.Mutex
		canceled chan struct{} // closed by session/cancel of the running turn
	)
	defer turns.Wait()
	in := bufio.NewReader(stdin)
	for ctx.Err() == nil {
		line, err := in.ReadBytes('\n')
		if err != nil {
			mu.Lock()
			if canceled != nil {
				close(canceled) // the client is gone: so is the turn
				canceled = nil
			}
			mu.Unlock()
			return nil
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Prompt []struct {
					Text string `json:"text"`
				} `json:"prompt"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch m.Method {
		case "initialize":
			answer(m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}, "authMethods": []any{}})
		case "session/new":
			answer(m.ID, map[string]any{"sessionId": "flood-session"})
		case "session/cancel":
			mu.Lock()
			if canceled != nil {
				close(canceled)
				canceled = nil
			}
			mu.Unlock()
		case "session/prompt":
			var text string
			if len(m.Params.Prompt) > 0 {
				text = m.Params.Prompt[0].Text
			}
			stop := make(chan struct{})
			mu.Lock()
			canceled = stop
			mu.Unlock()
			turns.Add(1)
			go func(id json.RawMessage) {
				defer turns.Done()
				reason := "end_turn"
				if !flood(ctx, text, stop, send) {
					reason = "cancelled"
				}
				answer(id, map[string]any{"stopReason": reason})
			}(m.ID)
		}
	}
	return ctx.Err()
}

// flood sends the tool calls a prompt asks for; it reports false when the
// turn was canceled or the client went away first.
func flood(ctx context.Context, text string, stop <-chan struct{}, send func(any) bool) bool {
	var n, size int
	if _, err := fmt.Sscanf(text, "tools %d %d", &n, &size); err != nil {
		return true
	}
	locs := make([]map[string]any, Locations)
	for i := range locs {
		locs[i] = map[string]any{"path": fmt.Sprintf("f%02d/%s", i, strings.Repeat("x", max(size-4, 1)))}
	}
	for i := 0; n == 0 || i < n; i++ {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		default:
		}
		ok := send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": "flood-session",
			"update": map[string]any{
				"sessionUpdate": "tool_call", "toolCallId": fmt.Sprintf("call_%d", i), "title": "Read",
				"kind": "read", "status": "completed", "locations": locs,
			},
		}})
		if !ok {
			return false
		}
	}
	return true
}
