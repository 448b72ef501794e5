package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// ProtocolVersion is the ACP version this client speaks.
	ProtocolVersion = 1

	// DefaultMaxLine bounds one incoming line unless Config.MaxLine says otherwise.
	DefaultMaxLine = 16 << 20

	defaultStopGrace = 2 * time.Second

	// defaultStallTimeout bounds how long a write to the agent may make no
	// progress at all. Small messages fit the pipe and never wait; only an
	// agent that has left a full pipe unread this long is waited on, and it
	// is stopped rather than left to hold every caller that writes to it.
	defaultStallTimeout = 30 * time.Second

	// inboxSize is small on purpose: a slow consumer must throttle the agent
	// through its stdout pipe rather than let updates pile up here.
	inboxSize = 64

	// maxInvalidRun is how many invalid lines in a row end the connection.
	// Agents and the wrappers that launch them do print banners and log lines
	// on stdout, so a few are tolerated; an agent that keeps printing nothing
	// but noise is not speaking ACP and is stopped.
	maxInvalidRun = 100

	// maxWorkers bounds the agent requests answered at the same time; beyond
	// it the read loop waits, which throttles the agent.
	maxWorkers = 4
)

// Config describes the agent process to run.
type Config struct {
	Command []string  // argv of the agent
	Dir     string    // the sandbox directory: working directory, session cwd, root of file access
	Env     []string  // the complete environment of the process ("K=V"); nothing is inherited
	Stderr  io.Writer // where the agent's stderr goes; nil discards it
	MaxLine int       // max bytes of one incoming line; 0 means DefaultMaxLine
	Logger  *slog.Logger

	// Run, when set, is an agent that runs in this process instead of
	// Command: a goroutine that speaks ACP over the pipes it is given, with
	// Env as its environment (RunDemo is one). It must return once ctx is
	// done; that is how Close and a failed boot stop it.
	Run func(ctx context.Context, stdin io.Reader, stdout io.Writer, env []string) error

	// StopGrace is how long the agent gets to exit on its own after its
	// stdin is closed before its process group is killed; 0 means 2s.
	StopGrace time.Duration

	// StallTimeout is how long a write to the agent's stdin may make no
	// progress before the agent is stopped as broken; 0 means 30s.
	StallTimeout time.Duration

	// Launcher, when set, starts the agent process confined to Sandbox,
	// the sandbox directory (Dir is inside it; empty means Dir). Run
	// agents are not processes and are never confined.
	Launcher Launcher
	Sandbox  string
	// Confinement is what this agent's registry entry adds to the
	// launcher's (see Launcher).
	Confinement Confinement
	// FSBudget bounds the memory the agent's fs/read_text_file and
	// fs/write_text_file hold, shared with every agent it is given to;
	// nil shares one budget of DefaultFSBudget with every other Conn
	// started without one.
	FSBudget *FSBudget
	// Session is an earlier ACP session of this agent to go on with: when
	// the agent advertises loadSession, boot asks for it with session/load
	// instead of opening a new one. If the agent refuses, a new session
	// opens and Conn.Resume says why. Empty always opens a new session.
	Session string
	// MCPServers are given to the session (mcp.go); Start fails when one
	// needs a transport the agent does not advertise.
	MCPServers []MCPServer
	// ToolOutput tells the agent at initialize that this client takes the
	// output of the commands it runs (clientCapabilities._meta
	// .terminal_output), which claude-agent-acp and codex-acp then send in
	// their tool call updates' _meta.
	ToolOutput bool
}

// Kind tells what an Inbound value carries.
type Kind int

const (
	Update     Kind = iota + 1 // a session/update notification
	Permission                 // a session/request_permission request, to answer with Respond
	PromptDone                 // the answer to Prompt
	Exited                     // the process is gone; always the last value
)

func (k Kind) String() string {
	switch k {
	case Update:
		return "update"
	case Permission:
		return "permission"
	case PromptDone:
		return "prompt_done"
	case Exited:
		return "exited"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Inbound is one thing the agent said that the caller must act on.
type Inbound struct {
	Kind       Kind
	Params     json.RawMessage // Update and Permission: the raw params, for the translator to curate
	Request    RequestID       // Permission: the id to answer with Respond
	TurnID     string          // PromptDone: the turn given to Prompt
	StopReason string          // PromptDone: the ACP stopReason
	Usage      json.RawMessage // PromptDone: raw usage, if the agent sent any
	Err        error           // PromptDone: the agent's JSON-RPC error; Exited: why it ended
	Protocol   bool            // Exited: the agent broke the protocol (rather than exiting)
}

// Conn is a running agent with an open ACP session. Its methods are safe for
// concurrent use. Prompt, Cancel and Respond write to the agent's stdin and
// block while the agent does not read it; Close unblocks them.
type Conn struct {
	log      *slog.Logger
	proc     *proc
	stdin    *os.File
	stdout   *os.File
	files    *fsRoot
	fsq      *fsQuota
	fsCancel context.CancelFunc
	grace    time.Duration
	stall    time.Duration
	maxLine  int

	wmu sync.Mutex // one JSON object per line: writes must not interleave

	mu         sync.Mutex
	nextID     int64
	pending    map[int64]*call
	prompting  bool
	promptDone chan struct{}        // closed when the running prompt is answered or withdrawn
	cancelSent bool                 // session/cancel went out for the running prompt
	asks       map[string]RequestID // agent requests handed to the caller and not answered yet
	session    string
	auth       []AuthMethod
	caps       Capabilities // what initialize answered (boot.go)
	err        error
	loading    bool   // session/load is waiting for its answer: updates are its replay
	resume     Resume // how the session came to be

	sessionCfg SessionConfig // the session's mode and model (config.go)

	mcp []MCPServer // given to session/new and session/load (mcp.go)
	// toolOutput is Config.ToolOutput.
	toolOutput bool

	inbox      chan Inbound
	stopping   chan struct{} // closed by Close: the consumer has let go
	stopOnce   sync.Once
	stdinOnce  sync.Once
	procExited chan struct{} // closed when Wait returned
	ended      chan struct{} // closed when the process and the read loop are both over
	done       chan struct{}

	workers  sync.WaitGroup
	sem      chan struct{}
	invalid  atomic.Int64
	replayed atomic.Int64
	stalled  atomic.Bool // the agent left a write unread past the stall timeout
	reading  atomic.Bool // the read loop is blocked reading the agent's output
}

// call is one of our requests waiting for its response.
type call struct {
	prompt bool
	load   bool            // session/load: the updates before its answer are history
	turnID string          // prompt: the answer goes to the inbox
	ch     chan callResult // otherwise: the answer goes here
}

type callResult struct {
	result json.RawMessage
	err    error
}

var (
	errNotRunning = errors.New("agent is not running")
	errPrompting  = errors.New("agent is already running a prompt")
)

// Start spawns the agent, initializes ACP and opens a session. ctx bounds the
// whole boot; when it ends first, the agent is killed. On any error no
// process is left behind, and the error is a short sentence fit for people.
func Start(ctx context.Context, cfg Config) (*Conn, error) {
	if cfg.Run == nil && (len(cfg.Command) == 0 || cfg.Command[0] == "") {
		return nil, errors.New("agent command is empty")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, errors.New("sandbox directory is invalid")
	}
	files, err := openFSRoot(dir)
	if err != nil {
		log.Warn("open sandbox directory", "err", err)
		return nil, errors.New("sandbox directory cannot be opened")
	}
	var path string
	if cfg.Run == nil {
		if path, err = lookPath(cfg.Command[0]); err != nil {
			files.close()
			log.Warn("find agent command", "command", cfg.Command[0], "err", err)
			return nil, errors.New("agent command was not found")
		}
	}
	c, err := spawn(cfg, log, dir, path, files)
	if err != nil {
		files.close()
		log.Warn("start agent", "command", cfg.Command, "err", err)
		return nil, errors.New("agent could not be started")
	}
	c.mcp = cfg.MCPServers
	c.toolOutput = cfg.ToolOutput
	if err := c.boot(ctx, dir, cfg.Session); err != nil {
		c.abort()
		return nil, err
	}
	return c, nil
}

func spawn(cfg Config, log *slog.Logger, dir, path string, files *fsRoot) (*Conn, error) {
	grace := cfg.StopGrace
	if grace <= 0 {
		grace = defaultStopGrace
	}
	stall := cfg.StallTimeout
	if stall <= 0 {
		stall = defaultStallTimeout
	}
	maxLine := cfg.MaxLine
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	// A nil Env would make exec hand the server's own environment to the
	// agent; an empty one must stay empty.
	env := cfg.Env
	if env == nil {
		env = []string{}
	}
	// Our own pipes rather than StdoutPipe: Wait must not race the read loop,
	// and closing our end is how a blocked read is interrupted.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	var p *proc
	if cfg.Run != nil {
		p = startFunc(cfg.Run, env, stdinR, stdoutW)
	} else {
		p, err = startCommand(cfg, dir, path, env, stdinR, stdoutW, grace)
		if err != nil {
			stdinW.Close()
			stdoutR.Close()
			return nil, err
		}
	}
	fsCtx, fsCancel := context.WithCancel(context.Background())
	c := &Conn{
		log:        log.With("pid", p.pid),
		proc:       p,
		stdin:      stdinW,
		stdout:     stdoutR,
		files:      files,
		fsq:        newFSQuota(fsCtx, cfg.FSBudget, stall),
		fsCancel:   fsCancel,
		grace:      grace,
		stall:      stall,
		maxLine:    maxLine,
		pending:    make(map[int64]*call),
		asks:       make(map[string]RequestID),
		inbox:      make(chan Inbound, inboxSize),
		stopping:   make(chan struct{}),
		procExited: make(chan struct{}),
		ended:      make(chan struct{}),
		done:       make(chan struct{}),
		sem:        make(chan struct{}, maxWorkers),
	}
	go c.supervise()
	return c, nil
}

// call sends a request and waits for its response; used during boot.
func (c *Conn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	return c.callWith(ctx, &call{}, method, params)
}

func (c *Conn) callWith(ctx context.Context, p *call, method string, params any) (json.RawMessage, error) {
	ch := make(chan callResult, 1)
	p.ch = ch
	id, err := c.register(p)
	if err != nil {
		return nil, err
	}
	if err := c.write(request{JSONRPC: "2.0", ID: id, Method: method, Params: params}); err != nil {
		c.unregister(id)
		// A failed write almost always means the agent is exiting; wait to
		// learn why rather than report a broken pipe.
		select {
		case <-c.ended:
			return nil, errNotRunning
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case r := <-ch:
		return r.result, r.err
	case <-ctx.Done():
		c.unregister(id)
		return nil, ctx.Err()
	case <-c.ended:
		select {
		case r := <-ch: // answered just before the end
			return r.result, r.err
		default:
			return nil, errNotRunning
		}
	}
}

func (c *Conn) register(p *call) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.ended:
		return 0, errNotRunning
	default:
	}
	if p.prompt {
		if c.prompting {
			return 0, errPrompting
		}
		c.prompting, c.cancelSent = true, false
		c.promptDone = make(chan struct{})
	}
	if p.load {
		c.loading = true
	}
	// Ids start at 0 so that a response with id 0 is exercised from the
	// first message on.
	id := c.nextID
	c.nextID++
	c.pending[id] = p
	return id, nil
}

func (c *Conn) unregister(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pending[id]; p != nil && p.prompt {
		c.endPromptLocked()
	}
	if p := c.pending[id]; p != nil && p.load {
		c.loading = false
	}
	delete(c.pending, id)
}

// endPromptLocked records that no prompt runs any more; c.mu is held.
func (c *Conn) endPromptLocked() {
	if c.prompting {
		c.prompting = false
		close(c.promptDone)
	}
}

// Inbox returns everything the agent sends that the caller must act on, in
// the order it was read. The caller must keep receiving until the channel is
// closed: when it does not, the agent is throttled, and the connection cannot
// end. Exited is always the last value, after which the channel is closed.
// Once Close has been called, values the caller has not received yet may be
// dropped.
func (c *Conn) Inbox() <-chan Inbound { return c.inbox }

// Prompt sends session/prompt. Its outcome arrives in Inbox as PromptDone with
// turnID. Only one prompt runs at a time. When the agent exits first, no
// PromptDone comes: Exited says it all.
func (c *Conn) Prompt(turnID string, text string) error {
	return c.PromptBlocks(turnID, []Block{{Type: "text", Text: text}})
}

// Cancel sends the session/cancel notification. Answering the permission
// requests still pending with a cancelled outcome is up to the caller, who
// holds them (Close does it for those left when it stops the agent).
func (c *Conn) Cancel() error {
	c.mu.Lock()
	if c.prompting {
		c.cancelSent = true
	}
	c.mu.Unlock()
	return c.cancelNotice()
}

func (c *Conn) cancelNotice() error {
	return c.write(notification{JSONRPC: "2.0", Method: "session/cancel", Params: sessionParams{SessionID: c.sessionID()}})
}

// Respond answers a request of the agent, such as a permission request, with
// result (marshaled as JSON; nil sends null). Each request is answered once:
// a request already answered, by Respond or by Close, is an error.
func (c *Conn) Respond(req RequestID, result any) error {
	if req.IsZero() {
		return errors.New("agent request id is missing")
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("encode answer: %w", err)
	}
	c.mu.Lock()
	_, ok := c.asks[string(req.raw)]
	delete(c.asks, string(req.raw))
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("agent request %s is not waiting for an answer", req)
	}
	return c.write(response{JSONRPC: "2.0", ID: req.raw, Result: raw})
}

// PermissionSelected is the result that answers a permission request with
// the option the user chose; pass it to Respond.
func PermissionSelected(optionID string) any {
	return permissionResult{Outcome: permissionOutcome{Outcome: "selected", OptionID: optionID}}
}

// PermissionCancelled is the result that answers a permission request whose
// turn was cancelled; after session/cancel, ACP wants it for every request
// still pending.
func PermissionCancelled() any {
	return permissionResult{Outcome: permissionOutcome{Outcome: "cancelled"}}
}

type permissionResult struct {
	Outcome permissionOutcome `json:"outcome"`
}

type permissionOutcome struct {
	Outcome  string `json:"outcome"`
	OptionID string `json:"optionId,omitempty"`
}

// Done is closed when the process has exited, the read loop has ended and
// Exited has been delivered (or dropped, after Close).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err tells why the connection ended: ErrStopped after Close, a
// *ProtocolError, or an *ExitError. It is nil until the end.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AuthMethods returns the ways of authenticating the agent offered when it
// was initialized; see AuthMethod.
func (c *Conn) AuthMethods() []AuthMethod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.auth)
}

// InvalidLines counts the lines the agent sent that were not JSON-RPC
// messages; they are logged and otherwise ignored.
func (c *Conn) InvalidLines() int64 { return c.invalid.Load() }

func (c *Conn) sessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// write sends one message as one line.
func (c *Conn) write(v any) error {
	b, err := encodeLine(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	return c.writeLine(b)
}

// writeLine sends one line, already encoded and ending in a newline.
func (c *Conn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(b) > 0 {
		// The deadline moves with every byte the agent takes, so a slow
		// reader is waited for and only one that takes nothing is not.
		// A pipe without deadlines (not pollable) just blocks.
		_ = c.stdin.SetWriteDeadline(time.Now().Add(c.stall))
		n, err := c.stdin.Write(b)
		b = b[n:]
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && n > 0:
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.log.Warn("agent has not read its input for too long; stopping it", "stall", c.stall)
			c.stalled.Store(true)
			c.proc.kill()
			return errNotRunning
		default:
			c.log.Debug("write to agent", "err", err)
			return errNotRunning
		}
	}
	return nil
}

func (c *Conn) closeStdin() {
	c.stdinOnce.Do(func() { c.stdin.Close() })
}

// The ACP shapes this client sends.
type (
	initializeParams struct {
		ProtocolVersion    int                `json:"protocolVersion"`
		ClientCapabilities clientCapabilities `json:"clientCapabilities"`
		ClientInfo         implementation     `json:"clientInfo"`
	}
	clientCapabilities struct {
		FS       fsCapabilities `json:"fs"`
		Terminal bool           `json:"terminal"`
		// Meta is left out unless a capability of an extension is on.
		Meta *clientMeta `json:"_meta,omitempty"`
	}
	clientMeta struct {
		TerminalOutput bool `json:"terminal_output"`
	}
	fsCapabilities struct {
		ReadTextFile  bool `json:"readTextFile"`
		WriteTextFile bool `json:"writeTextFile"`
	}
	implementation struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	newSessionParams struct {
		Cwd        string      `json:"cwd"`
		MCPServers []MCPServer `json:"mcpServers"`
	}
	loadSessionParams struct {
		SessionID  string      `json:"sessionId"`
		Cwd        string      `json:"cwd"`
		MCPServers []MCPServer `json:"mcpServers"`
	}
	sessionParams struct {
		SessionID string `json:"sessionId"`
	}
	promptParams struct {
		SessionID string  `json:"sessionId"`
		Prompt    []Block `json:"prompt"`
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
)
