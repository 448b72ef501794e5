// Command faultagent is an ACP agent that misbehaves on purpose, for the
// reliability tests of the coordinator and the server. Its first argument
// chooses the fault:
//
//	silent          never answers initialize
//	boot-crash      answers initialize, then exits on session/new
//	turn-crash      streams a little of a turn, then exits
//	turn-hang       streams one chunk, then ignores everything, cancel included
//	stubborn        like turn-hang, and does not exit when its stdin closes;
//	                it writes its pid to agent.pid in its cwd
//	deaf            asks to read a 4 MiB file, then never reads its stdin again
//	garbage         mixes a few lines that are not JSON-RPC into a good turn
//	noise           answers a prompt with nothing but lines that are not JSON-RPC
//	longline [MiB]  sends one line of MiB mebibytes (default 100)
//	flood [N]       sends N message chunks (default 50000) as fast as it can
//	late-permission asks permission after the turn was cancelled, and writes
//	                the answer it got to permission-outcome.json in its cwd
//	exit-pending    asks permission, then exits without waiting for the answer
//	auth-required   offers ways to log in, then refuses session/new with
//	                auth_required, as Gemini CLI does without its API key
//	prompt-error    answers every prompt with a JSON-RPC error whose data
//	                carries the model API's refusal, as the adapters do
//	stop-log [PATH] asks permission, then writes what reaches it to PATH
//	                (stop-log.txt in its cwd), one line each: notifications by
//	                method, the answer to its question by outcome, and "eof"
//	                when its stdin closes; it answers the prompt cancelled
//	                once it has the cancel and the answer
//
// Everything that is not part of the fault is the plain happy path of ACP v1,
// so each fault is tested alone.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// peer is the agent side of one connection.
type peer struct {
	in      *bufio.Reader
	out     *bufio.Writer
	session string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: faultagent FAULT [ARG]")
		os.Exit(2)
	}
	p := &peer{in: bufio.NewReaderSize(os.Stdin, 1<<20), out: bufio.NewWriterSize(os.Stdout, 64<<10), session: "fault-session-1"}
	fault, arg := os.Args[1], ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	run, ok := faults[fault]
	if !ok {
		fmt.Fprintf(os.Stderr, "faultagent: unknown fault %q\n", fault)
		os.Exit(2)
	}
	run(p, arg)
}

var faults = map[string]func(p *peer, arg string){
	"silent": func(p *peer, _ string) { p.drain() },
	"boot-crash": func(p *peer, _ string) {
		m := p.read()
		p.answer(m.ID, initializeResult())
		p.read() // session/new
		os.Exit(4)
	},
	"turn-crash": func(p *peer, _ string) {
		p.handshake()
		p.prompt()
		p.chunk("I will not finish this. ")
		p.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Doomed", "kind": "other", "status": "in_progress"})
		p.flush()
		os.Exit(3)
	},
	"turn-hang": func(p *peer, _ string) {
		p.handshake()
		p.prompt()
		p.chunk("Thinking forever. ")
		p.drain()
	},
	"stubborn": func(p *peer, _ string) {
		// Its pid goes to agent.pid in its cwd: nothing but a kill ends it,
		// and whoever runs it must be able to.
		if err := os.WriteFile("agent.pid", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			os.Exit(1)
		}
		p.handshake()
		p.prompt()
		p.chunk("Thinking forever. ")
		p.drainQuiet()
		forever() // stdin closed, and still running: only a kill ends it
	},
	"deaf": func(p *peer, _ string) {
		p.handshake()
		p.prompt()
		p.chunk("Reading a big file, then never reading again. ")
		if err := os.WriteFile("big.txt", []byte(strings.Repeat("x", 4<<20)), 0o600); err != nil {
			os.Exit(1)
		}
		p.send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file", "params": map[string]any{"sessionId": p.session, "path": "big.txt"}})
		// The first bytes of the answer mean the client is in the middle of
		// writing it: what the pipe cannot hold stays in the client's write.
		if _, err := p.in.Peek(1); err != nil {
			os.Exit(0)
		}
		p.chunk("Asked. ")
		forever() // the answer, and everything after it, stays unread
	},
	"garbage": func(p *peer, _ string) {
		p.handshake()
		id := p.prompt()
		for i, junk := range []string{"Loading model weights...", "{", "[1,2,3]", `{"jsonrpc":"2.0"}`, "\x00\x01binary", "null"} {
			p.raw(junk)
			p.chunk(fmt.Sprintf("part %d ", i))
		}
		p.answer(id, map[string]any{"stopReason": "end_turn"})
		p.drain()
	},
	"noise": func(p *peer, _ string) {
		p.handshake()
		p.prompt()
		for i := range 1000 {
			p.raw(fmt.Sprintf("debug: step %d", i))
		}
		p.drain()
	},
	"longline": func(p *peer, arg string) {
		mib := 100
		if n, err := strconv.Atoi(arg); err == nil && n > 0 {
			mib = n
		}
		p.handshake()
		p.prompt()
		p.chunk("Here comes a big one. ")
		p.flush()
		block := strings.Repeat("A", 1<<20)
		io.WriteString(p.out, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"`+p.session+`","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`)
		for range mib {
			if _, err := io.WriteString(p.out, block); err != nil {
				os.Exit(0) // the client stopped reading: it is done with us
			}
		}
		p.raw(`"}}}}`)
		p.drain()
	},
	"flood": func(p *peer, arg string) {
		n := 50000
		if v, err := strconv.Atoi(arg); err == nil && v > 0 {
			n = v
		}
		p.handshake()
		id := p.prompt()
		for i := range n {
			p.chunkNoFlush(fmt.Sprintf("w%d ", i))
		}
		p.answer(id, map[string]any{"stopReason": "end_turn"})
		p.drain()
	},
	"late-permission": func(p *peer, _ string) {
		p.handshake()
		id := p.prompt()
		p.chunk("Waiting for a cancel. ")
		for {
			if m := p.read(); m.Method == "session/cancel" {
				break
			}
		}
		p.send(map[string]any{"jsonrpc": "2.0", "id": "late-1", "method": "session/request_permission", "params": map[string]any{
			"sessionId": p.session,
			"toolCall":  map[string]any{"toolCallId": "call_late", "title": "Write late.txt", "kind": "edit", "status": "pending"},
			"options":   []map[string]string{{"optionId": "yes", "name": "Allow", "kind": "allow_once"}, {"optionId": "no", "name": "Reject", "kind": "reject_once"}},
		}})
		var answer message
		for {
			if answer = p.read(); answer.Method == "" {
				break
			}
		}
		if err := os.WriteFile("permission-outcome.json", answer.Result, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "faultagent:", err)
			os.Exit(1)
		}
		p.answer(id, map[string]any{"stopReason": "cancelled"})
		p.drain()
	},
	"exit-pending": func(p *peer, _ string) {
		p.handshake()
		p.prompt()
		p.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Write x.txt", "kind": "edit", "status": "pending"})
		p.send(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "session/request_permission", "params": map[string]any{
			"sessionId": p.session,
			"toolCall":  map[string]any{"toolCallId": "call_1"},
			"options":   []map[string]string{{"optionId": "yes", "name": "Allow", "kind": "allow_once"}},
		}})
		p.flush()
		os.Exit(1)
	},
	"auth-required": func(p *peer, _ string) {
		m := p.read()
		res := initializeResult()
		res["authMethods"] = []map[string]any{
			{"id": "oauth-personal", "name": "Log in with Google", "description": "Log in with your Google account"},
			{"id": "gemini-api-key", "name": "Gemini API key", "description": "Use an API key with Gemini Developer API"},
		}
		p.answer(m.ID, res)
		m = p.read()
		p.fail(m.ID, map[string]any{"code": -32000, "message": "Gemini API key is missing or not configured."})
		p.drain()
	},
	"prompt-error": func(p *peer, _ string) {
		p.handshake()
		for {
			p.fail(p.prompt(), map[string]any{"code": -32603, "message": "Internal error", "data": map[string]any{
				"details": `API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`,
			}})
		}
	},
	"stop-log": func(p *peer, path string) {
		if path == "" {
			path = "stop-log.txt"
		}
		log, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			os.Exit(1)
		}
		// Each line is on disk before the next read: the agent may be
		// killed at any moment of the stop.
		record := func(s string) {
			log.WriteString(s + "\n")
			log.Sync()
		}
		p.handshake()
		id := p.prompt()
		p.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Write x.txt", "kind": "edit", "status": "pending"})
		p.send(map[string]any{"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission", "params": map[string]any{
			"sessionId": p.session,
			"toolCall":  map[string]any{"toolCallId": "call_1"},
			"options":   []map[string]string{{"optionId": "yes", "name": "Allow", "kind": "allow_once"}, {"optionId": "no", "name": "Reject", "kind": "reject_once"}},
		}})
		canceled, answered := false, false
		for {
			line, err := p.in.ReadBytes('\n')
			if err != nil {
				record("eof")
				os.Exit(0)
			}
			var m message
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			if m.Method != "" {
				record(m.Method)
				canceled = canceled || m.Method == "session/cancel"
			} else {
				var r struct {
					Outcome struct {
						Outcome string `json:"outcome"`
					} `json:"outcome"`
				}
				json.Unmarshal(m.Result, &r)
				record("answer " + r.Outcome.Outcome)
				answered = true
			}
			if canceled && answered && id != nil {
				p.answer(id, map[string]any{"stopReason": "cancelled"})
				id = nil
			}
		}
	},
}

// forever blocks for good. A bare select{} would not: with no other
// goroutine the runtime reports a deadlock and exits.
func forever() {
	for {
		time.Sleep(time.Hour)
	}
}

func initializeResult() map[string]any {
	return map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}, "authMethods": []any{}}
}

// read returns the next message; the end of stdin ends the agent.
func (p *peer) read() message {
	for {
		line, err := p.in.ReadBytes('\n')
		if err != nil {
			os.Exit(0)
		}
		var m message
		if json.Unmarshal(line, &m) == nil {
			return m
		}
	}
}

// drain reads until stdin closes, answering nothing, then exits.
func (p *peer) drain() {
	p.flush()
	io.Copy(io.Discard, p.in)
	os.Exit(0)
}

// drainQuiet reads until stdin closes and returns.
func (p *peer) drainQuiet() {
	p.flush()
	io.Copy(io.Discard, p.in)
}

func (p *peer) handshake() {
	m := p.read()
	p.answer(m.ID, initializeResult())
	m = p.read()
	p.answer(m.ID, map[string]any{"sessionId": p.session})
	p.flush()
}

// prompt waits for session/prompt and returns its id.
func (p *peer) prompt() json.RawMessage {
	for {
		if m := p.read(); m.Method == "session/prompt" {
			return m.ID
		}
	}
}

func (p *peer) raw(s string) {
	io.WriteString(p.out, s+"\n")
	p.flush()
}

func (p *peer) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	p.out.Write(append(b, '\n'))
	p.flush()
}

func (p *peer) answer(id json.RawMessage, result any) {
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (p *peer) fail(id json.RawMessage, rpcErr map[string]any) {
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcErr})
}

func (p *peer) update(u map[string]any) {
	p.send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": p.session, "update": u}})
}

func (p *peer) chunk(text string) {
	p.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": text}})
}

// chunkNoFlush queues a chunk in the buffer, so a flood goes out as fast as
// the pipe takes it.
func (p *peer) chunkNoFlush(text string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": p.session,
		"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": text}}}})
	if _, err := p.out.Write(append(b, '\n')); err != nil {
		os.Exit(0)
	}
}

func (p *peer) flush() {
	if err := p.out.Flush(); err != nil {
		os.Exit(0) // nobody reads our output any more
	}
}
