package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Resume tells how a connection's session came to be.
type Resume struct {
	// Asked is the session Config.Session asked to load ("" for none).
	Asked string
	// Supported: the agent advertises loadSession.
	Supported bool
	// Loaded: session/load succeeded, and the conversation goes on.
	Loaded bool
	// Err is the agent's refusal of session/load, after which a new
	// session was opened; nil when it was not refused (or not asked).
	Err error
	// Replayed counts the session updates the agent sent while loading:
	// the conversation's history, dropped rather than delivered.
	Replayed int64
}

// Capabilities is what an agent said it can do in its answer to
// initialize (ACP agentCapabilities): load a session, take images, audio
// and embedded resources in a prompt, and reach MCP servers over HTTP or
// SSE besides stdio.
type Capabilities struct {
	LoadSession                   bool
	Image, Audio, EmbeddedContext bool
	MCPHTTP, MCPSSE               bool
}

// Capabilities answers what the agent advertised at initialize.
func (c *Conn) Capabilities() Capabilities {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.caps
}

// Resume tells whether the session is the one Config.Session asked for.
func (c *Conn) Resume() Resume {
	c.mu.Lock()
	r := c.resume
	c.mu.Unlock()
	r.Replayed = c.replayed.Load()
	return r
}

// SessionID is the agent's own id of the open session: the one to give as
// Config.Session to a later boot. It is private to the caller (docs/agents.md).
func (c *Conn) SessionID() string { return c.sessionID() }

// clientMeta is the _meta of the capabilities this client advertises.
func (c *Conn) clientMeta() *clientMeta {
	if !c.toolOutput {
		return nil
	}
	return &clientMeta{TerminalOutput: true}
}

// boot runs initialize, then session/load of the earlier session when there
// is one and the agent can load it, else session/new.
func (c *Conn) boot(ctx context.Context, dir, earlier string) error {
	res, err := c.call(ctx, "initialize", initializeParams{
		ProtocolVersion: ProtocolVersion,
		ClientCapabilities: clientCapabilities{
			FS:   fsCapabilities{ReadTextFile: true, WriteTextFile: true},
			Meta: c.clientMeta(),
		},
		ClientInfo: implementation{Name: "sparkles", Version: "1"},
	})
	if err != nil {
		return c.bootError(ctx, "initialize", err)
	}
	var ir struct {
		ProtocolVersion   json.Number     `json:"protocolVersion"`
		AuthMethods       json.RawMessage `json:"authMethods"`
		AgentCapabilities struct {
			LoadSession        bool `json:"loadSession"`
			PromptCapabilities struct {
				Image           bool `json:"image"`
				Audio           bool `json:"audio"`
				EmbeddedContext bool `json:"embeddedContext"`
			} `json:"promptCapabilities"`
			MCPCapabilities struct {
				HTTP bool `json:"http"`
				SSE  bool `json:"sse"`
			} `json:"mcpCapabilities"`
		} `json:"agentCapabilities"`
	}
	if err := json.Unmarshal(res, &ir); err != nil {
		return errors.New("agent sent an invalid answer to initialize")
	}
	if ir.ProtocolVersion.String() != fmt.Sprint(ProtocolVersion) {
		return fmt.Errorf("agent speaks ACP version %q; only version %d is supported", ir.ProtocolVersion, ProtocolVersion)
	}
	// A list of the wrong shape is no list: ACP lets the boot go on.
	var methods []json.RawMessage
	_ = json.Unmarshal(ir.AuthMethods, &methods)
	auth := parseAuthMethods(methods)
	c.mu.Lock()
	c.auth = auth
	c.resume = Resume{Asked: earlier, Supported: ir.AgentCapabilities.LoadSession}
	ac := ir.AgentCapabilities
	c.caps = Capabilities{
		LoadSession: ac.LoadSession,
		Image:       ac.PromptCapabilities.Image, Audio: ac.PromptCapabilities.Audio, EmbeddedContext: ac.PromptCapabilities.EmbeddedContext,
		MCPHTTP: ac.MCPCapabilities.HTTP, MCPSSE: ac.MCPCapabilities.SSE,
	}
	c.mu.Unlock()
	if err := checkMCP(c.mcp, c.caps); err != nil {
		return err
	}
	if earlier != "" && ir.AgentCapabilities.LoadSession {
		loaded, err := c.load(ctx, dir, earlier)
		if err != nil {
			return err
		}
		if loaded {
			return nil
		}
	}
	res, err = c.call(ctx, "session/new", newSessionParams{Cwd: dir, MCPServers: c.mcpServers()})
	if err != nil {
		return c.bootError(ctx, "session/new", err)
	}
	var sr struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &sr); err != nil || sr.SessionID == "" {
		return errors.New("agent did not open a session")
	}
	c.setSessionConfig(res)
	c.mu.Lock()
	c.session = sr.SessionID
	c.mu.Unlock()
	return nil
}

// load asks the agent for an earlier session. The agent replays the
// conversation as session/update notifications before it answers; the read
// loop drops them (they are history, not news) and counts them. A refusal
// is no boot error: the caller opens a new session instead, and the reason
// is kept in Resume. Gemini CLI 0.61, for one, cannot find a session made
// in the same clock minute (-32603 "No previous sessions found").
func (c *Conn) load(ctx context.Context, dir, id string) (bool, error) {
	res, err := c.callWith(ctx, &call{load: true}, "session/load", loadSessionParams{SessionID: id, Cwd: dir, MCPServers: c.mcpServers()})
	var rpcErr *RPCError
	switch {
	case err == nil:
		c.setSessionConfig(res)
		c.mu.Lock()
		c.session = id
		c.resume.Loaded = true
		c.mu.Unlock()
		return true, nil
	case errors.As(err, &rpcErr):
		c.log.Warn("agent refused to load its earlier session; opening a new one", "reply", rpcErr)
		c.mu.Lock()
		c.resume.Err = rpcErr
		c.mu.Unlock()
		return false, nil
	}
	return false, c.bootError(ctx, "session/load", err)
}

func (c *Conn) bootError(ctx context.Context, method string, err error) error {
	var rpcErr *RPCError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("agent did not start in time")
	case errors.Is(err, context.Canceled):
		return errors.New("agent start was canceled")
	case errors.As(err, &rpcErr):
		c.log.Warn("agent refused a boot request", "method", method, "reply", rpcErr)
		if method == "initialize" {
			return errors.New("agent refused to initialize")
		}
		if auth := c.AuthMethods(); rpcErr.Code == CodeAuthRequired || len(auth) > 0 {
			return &AuthError{Methods: auth, Err: rpcErr}
		}
		return errors.New("agent refused to open a session")
	case errors.Is(err, errNotRunning):
		return &StoppedError{Step: method, Err: c.Err()}
	}
	c.log.Warn("agent boot failed", "method", method, "err", err)
	return errors.New("agent failed to start")
}

// StoppedError is why Start failed when the agent ended before it answered
// a boot request: Step is that request ("initialize", "session/new",
// "session/load") and Err why it ended, an *ExitError when it exited by
// itself. Its callers tell people what happened and what to do from it.
type StoppedError struct {
	Step string
	Err  error
}

func (e *StoppedError) Error() string {
	if e.Err == nil {
		return "agent stopped while starting"
	}
	return "agent stopped while starting: " + e.Err.Error()
}

func (e *StoppedError) Unwrap() error { return e.Err }
