package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// deliver hands a value to the consumer, blocking while it is busy; that
// block is the backpressure on the agent. After Close it never blocks.
func (c *Conn) deliver(in Inbound) {
	select {
	case c.inbox <- in:
		return
	default:
	}
	select {
	case c.inbox <- in:
	case <-c.stopping:
	}
}

// supervise owns the end of the connection: whichever of the process and its
// output ends first, it makes sure the other ends too, then reports once.
func (c *Conn) supervise() {
	readDone := make(chan error, 1)
	go func() { readDone <- c.readLoop() }()
	waited := make(chan *ExitError, 1)
	go func() {
		exit := c.proc.wait()
		close(c.procExited)
		waited <- exit
	}()

	var readErr error
	var exit *ExitError
	select {
	case readErr = <-readDone:
		var protoErr *ProtocolError
		if errors.As(readErr, &protoErr) {
			c.log.Warn("agent broke the protocol; killing it", "err", readErr)
			c.proc.kill()
			exit = <-waited
			break
		}
		// The output closed, so the process is normally on its way out.
		t := time.NewTimer(c.grace)
		select {
		case exit = <-waited:
		case <-t.C:
			c.proc.kill()
			exit = <-waited
			readErr = &ProtocolError{msg: "agent closed its output but kept running"}
		}
		t.Stop()
	case exit = <-waited:
		// Anything left in the group (the agent's own children) would hold
		// the pipes open; nothing more can be written to a dead agent.
		c.proc.kill()
		c.closeStdin()
		readErr = c.drain(readDone)
	}
	c.proc.kill()
	c.closeStdin()
	c.stdout.Close()
	c.fsCancel() // a file request waiting for the budget waits no more
	c.workers.Wait()
	c.files.close()

	err := c.endReason(readErr, exit)
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.ended)
	var protoErr *ProtocolError
	c.log.Info("agent ended", "reason", err)
	c.deliver(Inbound{Kind: Exited, Err: err, Protocol: errors.As(err, &protoErr)})
	close(c.inbox)
	close(c.done)
}

// drain lets the read loop deliver what the dead agent left in its pipe. A
// process that escaped the group can hold the pipe open forever, so once the
// loop has sat in a read with nothing to read for a grace period, the pipe is
// closed. A loop that is waiting on a slow consumer is left alone: it still
// has lines to deliver.
func (c *Conn) drain(readDone <-chan error) error {
	tick := time.NewTicker(c.grace)
	defer tick.Stop()
	for {
		select {
		case err := <-readDone:
			return err
		case <-tick.C:
			if c.reading.Load() {
				c.stdout.Close()
			}
		}
	}
}

func (c *Conn) endReason(readErr error, exit *ExitError) error {
	select {
	case <-c.stopping:
		return ErrStopped
	default:
	}
	var protoErr *ProtocolError
	if errors.As(readErr, &protoErr) {
		return protoErr
	}
	if c.stalled.Load() {
		return &ProtocolError{msg: fmt.Sprintf("agent did not read its input for %s", c.stall)}
	}
	return exit
}

// readLoop reads the agent's output until it ends. It returns a
// *ProtocolError for a violation, nil otherwise.
func (c *Conn) readLoop() error {
	lr := newLineReader(watchedReader{c.stdout, &c.reading}, c.maxLine)
	run := 0
	for {
		line, err := lr.next()
		if errors.Is(err, errLineTooLong) {
			return &ProtocolError{msg: fmt.Sprintf("agent sent a line longer than %d bytes", c.maxLine)}
		}
		if err != nil {
			return nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if c.dispatch(line) {
			run = 0
			continue
		}
		run++
		if n := c.invalid.Add(1); n <= 10 || n%1000 == 0 {
			c.log.Warn("agent sent a line that is not JSON-RPC", "bytes", len(line), "total", n)
		}
		if run > maxInvalidRun {
			return &ProtocolError{msg: "agent sent too many invalid messages"}
		}
	}
}

// dispatch handles one line and reports whether it was a JSON-RPC message.
func (c *Conn) dispatch(line []byte) bool {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return false
	}
	switch {
	case m.Method != "" && len(m.ID) > 0:
		c.handleRequest(&m)
	case m.Method != "":
		if m.Method == "session/update" {
			c.mu.Lock()
			replay := c.loading
			c.mu.Unlock()
			if replay {
				// What the agent replays while it loads a session is the
				// conversation so far: history, not events of a turn.
				c.replayed.Add(1)
				return true
			}
			c.deliver(Inbound{Kind: Update, Params: m.Params})
		} else {
			c.log.Debug("dropped agent notification", "method", m.Method)
		}
	case m.hasID() && (m.Result != nil || m.Error != nil):
		c.handleResponse(&m)
	case m.Error != nil:
		// A null id: the agent could not read one of our messages.
		c.log.Warn("agent reported an error", "code", m.Error.Code, "message", m.Error.Message)
	default:
		return false
	}
	return true
}

func (c *Conn) handleRequest(m *message) {
	id, method, params := m.ID, m.Method, m.Params
	switch method {
	case "session/request_permission":
		// Checked and recorded in one step with Close's collection of the
		// requests still waiting, so that every request is answered once:
		// by the caller, by Close, or here once Close has begun.
		c.mu.Lock()
		stopping := isClosed(c.stopping)
		if !stopping {
			c.asks[string(id)] = RequestID{raw: id}
		}
		c.mu.Unlock()
		if stopping {
			c.work(func() { c.reply(id, PermissionCancelled(), nil) })
			return
		}
		c.deliver(Inbound{Kind: Permission, Params: params, Request: RequestID{raw: id}})
	case "fs/read_text_file":
		c.work(func() { c.serveRead(id, params) })
	case "fs/write_text_file":
		c.work(func() { c.serveWrite(id, params) })
	default:
		c.log.Debug("agent request not supported", "method", method)
		c.work(func() {
			c.reply(id, nil, &RPCError{Code: codeMethodNotFound, Message: "method not found: " + method})
		})
	}
}

// work runs an answer off the read loop, so that a write to an agent which is
// itself blocked writing to us cannot deadlock the two.
func (c *Conn) work(f func()) {
	c.sem <- struct{}{}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		defer func() { <-c.sem }()
		f()
	}()
}

func (c *Conn) reply(id json.RawMessage, result any, rpcErr *RPCError) {
	r := response{JSONRPC: "2.0", ID: id, Error: rpcErr}
	if rpcErr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			r.Error = &RPCError{Code: codeInternal, Message: "internal error"}
		} else {
			r.Result = raw
		}
	}
	if err := c.write(r); err != nil {
		c.log.Debug("answer agent request", "err", err)
	}
}

func (c *Conn) handleResponse(m *message) {
	id, ok := ourID(m.ID)
	var p *call
	if ok {
		c.mu.Lock()
		p = c.pending[id]
		delete(c.pending, id)
		if p != nil && p.prompt {
			c.endPromptLocked()
		}
		if p != nil && p.load {
			c.loading = false
		}
		c.mu.Unlock()
	}
	if p == nil {
		c.log.Warn("agent answered a request that is not pending", "id", string(m.ID))
		return
	}
	var err error
	if m.Error != nil {
		err = m.Error
	}
	if !p.prompt {
		p.ch <- callResult{result: m.Result, err: err}
		return
	}
	in := Inbound{Kind: PromptDone, TurnID: p.turnID, Err: err}
	if err == nil {
		var pr struct {
			StopReason string          `json:"stopReason"`
			Usage      json.RawMessage `json:"usage"`
			Meta       struct {
				// Gemini CLI reports a turn's tokens here and nowhere else.
				Quota struct {
					TokenCount struct {
						Input  *int64 `json:"input_tokens"`
						Output *int64 `json:"output_tokens"`
					} `json:"token_count"`
				} `json:"quota"`
			} `json:"_meta"`
		}
		if json.Unmarshal(m.Result, &pr) != nil || pr.StopReason == "" {
			in.Err = errors.New("agent answered the prompt without a stop reason")
		}
		in.StopReason = pr.StopReason
		if len(pr.Usage) > 0 && !bytes.Equal(pr.Usage, []byte("null")) {
			in.Usage = pr.Usage
		} else if tc := pr.Meta.Quota.TokenCount; tc.Input != nil || tc.Output != nil {
			// Only the two counts are taken, in the shape of ACP's usage.
			in.Usage, _ = json.Marshal(map[string]*int64{"inputTokens": tc.Input, "outputTokens": tc.Output})
		}
	}
	c.deliver(in)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watchedReader records whether a Read is in progress.
type watchedReader struct {
	r    io.Reader
	busy *atomic.Bool
}

func (w watchedReader) Read(p []byte) (int, error) {
	w.busy.Store(true)
	defer w.busy.Store(false)
	return w.r.Read(p)
}
