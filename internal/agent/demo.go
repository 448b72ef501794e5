package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"time"
)

// ErrCrash is what RunDemo returns when a prompt asks it to crash. It stops
// answering at once; the CLI turns it into exit status 3.
var ErrCrash = errors.New("demo agent crashed on request")

// DemoWord is a word of a prompt that steers the demo agent, and what it
// makes the agent do.
type DemoWord struct {
	Word string // as typed, with its argument: "write NAME"
	Does string
}

// DemoWords are the words the demo agent reacts to, in the order a help
// text lists them; the CLI's prompt help shows them, and so can any client.
var DemoWords = []DemoWord{
	{"read NAME", "read NAME (a name with . or /); else the file it writes, else README.md"},
	{"write NAME", "ask, then write NAME (notes.txt when no name follows)"},
	{"env", "show its environment in the reply (secrets come back [REDACTED])"},
	{"slow", "stream the reply in 100 steps, about 6 s under serve: time to try Ctrl-C"},
	{"hang", "stream one chunk, then wait until the turn is canceled"},
	{"crash", "exit in the middle of the turn, which fails"},
	{"recall", "say what was asked in the turn before this one (kept across restarts)"},
	{"plan", "send a plan of its steps (a to-do list) and mark each done as it goes"},
	{"output", "run a command that prints a few coloured lines and its environment, as terminal output to a client that takes it (tool.output)"},
	{"usage", "report its context tokens and a cost after each step, as agents report usage"},
	{"mcp", "name the MCP servers its session was given, and their transports (never their env or headers)"},
	{"mode", "say its mode and model (modes default and plan, models demo-small and demo-large)"},
	{"planmode", "switch itself to mode plan, as an agent that decides to plan first"},
}

// Demo is the demo agent with its pace. The zero value is RunDemo's, quick
// enough for tests; sparkles serve runs it slower (see SlowPause).
type Demo struct {
	// SlowPause is the pause between the 100 steps of a slow reply:
	// DefaultSlowPause when zero. Tests that interrupt slow turns keep it
	// short; a person trying Ctrl-C needs seconds (DemoPersonSlowPause).
	SlowPause time.Duration
}

const (
	// DefaultSlowPause makes a slow reply last about a second.
	DefaultSlowPause = 10 * time.Millisecond
	// DemoPersonSlowPause makes it last about six seconds: what sparkles
	// serve gives its demo agent, so that Ctrl-C can be tried on it.
	DemoPersonSlowPause = 60 * time.Millisecond
)

// RunDemo runs the demo agent at its quick pace: Demo{}.Run.
func RunDemo(ctx context.Context, in io.Reader, out io.Writer, env []string) error {
	return Demo{}.Run(ctx, in, out, env)
}

// Run runs the demo agent: a scripted ACP agent with no model, speaking
// over in and out, that exercises what real agents do (reasoning, tool calls,
// file access through the client, permission requests, streamed replies,
// cancellation) the same way every time. A prompt steers it with the words
// of DemoWords.
//
// It keeps each session's turns (prompt and reply) in $HOME/.sparkles-demo/
// SESSION.jsonl (its working directory when it has no HOME), as real
// agents keep theirs under their HOME, so that a later process can load the session (session/load): it
// replays the turns as user and agent message chunks, and recall sees them.
//
// It returns nil when in ends, ctx.Err when ctx ends first, ErrCrash when a
// prompt asks it to crash. The goroutine reading in may stay blocked in Read
// after Run returns until in is closed.
func (o Demo) Run(ctx context.Context, in io.Reader, out io.Writer, env []string) error {
	if o.SlowPause <= 0 {
		o.SlowPause = DefaultSlowPause
	}
	ctx, stop := context.WithCancel(ctx)
	d := &demo{ctx: ctx, out: out, env: env, pause: o.SlowPause, pending: make(map[int64]chan demoReply)}
	defer func() {
		stop() // a turn waiting on the client ends here
		d.turns.Wait()
	}()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		lr := newLineReader(in, 4*DefaultMaxLine)
		for {
			line, err := lr.next()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case lines <- append([]byte(nil), line...):
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case line := <-lines:
			if err := d.handle(line); err != nil {
				return err
			}
		}
	}
}

// demo is the agent side of one connection.
type demo struct {
	ctx   context.Context
	env   []string
	pause time.Duration // between the steps of a slow reply

	wmu sync.Mutex
	out io.Writer

	mu       sync.Mutex
	canRead  bool
	canWrite bool
	always   bool // the user chose the allow_always option: writes are no longer asked for
	termOut  bool // the client takes terminal output (clientCapabilities._meta)
	session  string
	cwd      string
	history  []demoEntry // the session's earlier turns
	mcp      []MCPServer // the MCP servers the session was given
	mode     string      // the session's mode and model (demo_config.go)
	model    string
	tools    int
	nextID   int64
	pending  map[int64]chan demoReply
	turn     *demoTurn
	turns    sync.WaitGroup
}

type demoReply struct {
	result json.RawMessage
	err    *RPCError
}

func (d *demo) handle(line []byte) error {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return nil // not for us; a real agent would log it
	}
	switch {
	case m.Method != "" && len(m.ID) > 0:
		return d.request(&m)
	case m.Method == "session/cancel":
		var p sessionParams
		_ = json.Unmarshal(m.Params, &p)
		d.mu.Lock()
		t := d.turn
		d.mu.Unlock()
		if t != nil && p.SessionID == d.sessionID() {
			t.cancel()
		}
	case m.Method == "":
		id, ok := ourID(m.ID)
		d.mu.Lock()
		ch := d.pending[id]
		delete(d.pending, id)
		d.mu.Unlock()
		if ok && ch != nil {
			ch <- demoReply{result: m.Result, err: m.Error}
		}
	}
	return nil
}

func (d *demo) request(m *message) error {
	switch m.Method {
	case "initialize":
		var p initializeParams
		if json.Unmarshal(m.Params, &p) != nil {
			return d.fail(m.ID, codeInvalidParams, "invalid initialize params")
		}
		d.mu.Lock()
		d.canRead = p.ClientCapabilities.FS.ReadTextFile
		d.canWrite = p.ClientCapabilities.FS.WriteTextFile
		d.termOut = p.ClientCapabilities.Meta != nil && p.ClientCapabilities.Meta.TerminalOutput
		d.mu.Unlock()
		return d.reply(m.ID, map[string]any{
			"protocolVersion": ProtocolVersion,
			"agentCapabilities": map[string]any{
				"loadSession":        true,
				"promptCapabilities": d.promptCaps(),
				// It only names the servers it is given, so it takes http;
				// sse, which MCP deprecates, it refuses, as some agents do.
				"mcpCapabilities": map[string]bool{"http": true, "sse": false},
			},
			"authMethods": []any{},
			"agentInfo":   implementation{Name: "sparkles-demo", Version: "1"},
		})
	case "session/new":
		var p newSessionParams
		if json.Unmarshal(m.Params, &p) != nil || !filepath.IsAbs(p.Cwd) {
			return d.fail(m.ID, codeInvalidParams, "session/new needs an absolute cwd")
		}
		sid := newDemoSession()
		d.mu.Lock()
		d.session, d.cwd, d.tools, d.history = sid, p.Cwd, 0, nil
		d.mcp = p.MCPServers
		d.mu.Unlock()
		return d.reply(m.ID, d.sessionAnswer(sid))
	case "session/load":
		return d.load(m)
	case "session/prompt":
		return d.prompt(m)
	case "session/set_mode", "session/set_model":
		return d.setConfig(m)
	}
	return d.fail(m.ID, codeMethodNotFound, "method not found: "+m.Method)
}

func (d *demo) prompt(m *message) error {
	var p struct {
		SessionID string            `json:"sessionId"`
		Prompt    []json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return d.fail(m.ID, codeInvalidParams, "invalid prompt params")
	}
	if p.SessionID == "" || p.SessionID != d.sessionID() {
		return d.fail(m.ID, codeInvalidParams, "unknown session")
	}
	var text string
	var attached []string
	for _, raw := range p.Prompt {
		var b textBlock
		if json.Unmarshal(raw, &b) == nil && b.Type == "text" {
			text += b.Text
		} else if a := demoAttachment(raw); a != "" {
			attached = append(attached, a)
		}
	}
	plan := parsePrompt(text)
	if plan.crash {
		return ErrCrash
	}
	d.mu.Lock()
	if d.turn != nil {
		d.mu.Unlock()
		return d.fail(m.ID, codeInvalidRequest, "a prompt is already running")
	}
	t := &demoTurn{d: d, id: m.ID, session: p.SessionID, cwd: d.cwd, text: text, attach: attached, plan: plan, stop: make(chan struct{})}
	d.turn = t
	d.turns.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.turns.Done()
		stopReason, usage := t.run()
		d.remember(demoEntry{Prompt: t.text, Reply: t.reply})
		d.mu.Lock()
		d.turn = nil
		d.mu.Unlock()
		if d.ctx.Err() == nil {
			_ = d.reply(t.id, map[string]any{"stopReason": stopReason, "usage": usage})
		}
	}()
	return nil
}

func (d *demo) sessionID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.session
}

// call sends a request to the client and waits for its answer. A cancelled
// turn still waits: ACP has the client answer every pending request itself.
func (d *demo) call(method string, params any) (json.RawMessage, *RPCError, error) {
	ch := make(chan demoReply, 1)
	d.mu.Lock()
	id := d.nextID
	d.nextID++
	d.pending[id] = ch
	d.mu.Unlock()
	if err := d.send(request{JSONRPC: "2.0", ID: id, Method: method, Params: params}); err != nil {
		return nil, nil, err
	}
	select {
	case r := <-ch:
		return r.result, r.err, nil
	case <-d.ctx.Done():
		return nil, nil, d.ctx.Err()
	}
}

func (d *demo) notify(params any) error {
	return d.send(notification{JSONRPC: "2.0", Method: "session/update", Params: params})
}

func (d *demo) reply(id json.RawMessage, result any) error {
	raw, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return d.send(response{JSONRPC: "2.0", ID: id, Result: raw})
}

func (d *demo) fail(id json.RawMessage, code int, msg string) error {
	return d.send(response{JSONRPC: "2.0", ID: id, Error: &RPCError{Code: code, Message: msg}})
}

func (d *demo) send(v any) error {
	b, err := encodeLine(v)
	if err != nil {
		return err
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, err = d.out.Write(b)
	return err
}
