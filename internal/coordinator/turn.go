package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// cancelGrace is how long an agent may take to answer session/cancel before
// the turn is completed without it and the agent is stopped.
const cancelGrace = 10 * time.Second

// turnTimers are the timers of the current turn, and the translator's
// flush, which only has chunks to flush while a turn runs.
type turnTimers struct {
	timeout *time.Timer // the turn ran Config.TurnTimeout
	cancel  *time.Timer // the agent did not answer a cancel within cancelGrace
	flush   *time.Timer // the translator's next flush of coalesced chunks
}

// stop stops the timers of a turn that ended.
func (t *turnTimers) stop() {
	t.timeout.Stop()
	t.cancel.Stop()
}

// startTurn accepts a turn: it runs at once when the agent is ready, or
// waits for the agent to boot. While another turn is open it is refused,
// or, with queue, waits behind it (queue.go).
func (b *box) startTurn(input string, blocks []sandbox.InputBlock, queue bool) (sandbox.Turn, error) {
	if b.deleted {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.EConflict, "sandbox %s is deleted; create a new one", b.id)
	}
	if b.turn != nil && !queue {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.ETurnInProgress,
			"turn %s is still %s; wait for its turn.completed, cancel it, or send the turn with \"queue\": true", b.turn.turn.ID, b.turn.turn.Status)
	}
	if err := b.c.admitDisk(b.id); err != nil {
		return sandbox.Turn{}, err
	}
	if _, _, err := b.translator(); err != nil {
		return sandbox.Turn{}, err
	}
	prompt, in, aerr := b.attach(input, blocks)
	if aerr != nil {
		return sandbox.Turn{}, aerr
	}
	t := &turnRun{
		turn: sandbox.Turn{
			ID: sandbox.NewID(sandbox.PrefixTurn), Object: "turn", SandboxID: b.id,
			// The resource shows the input as its turn.started will; the
			// agent alone gets it as it was sent.
			Status: sandbox.TurnQueued, Input: b.tr.RedactInput(in), CreatedAt: b.c.now(),
		},
		text: input, prompt: prompt,
	}
	if b.turn != nil {
		return b.enqueue(t)
	}
	b.turn = t
	if b.conn != nil {
		if err := b.runTurn(); err != nil {
			return sandbox.Turn{}, err
		}
		return t.turn, nil
	}
	queued := t.turn
	// The turn is accepted only once the store has it: a 202 for a turn
	// the log never heard of would be a turn nobody can find.
	err := b.tryWrite(nil, func(st *sandbox.State) error {
		if err := b.refuseDeleted(st); err != nil {
			return err
		}
		st.Sandbox.CurrentTurn = &queued
		return nil
	})
	if err != nil {
		b.turn = nil
		if sandbox.IsType(err, sandbox.EConflict) {
			b.deleted = true
		}
		return sandbox.Turn{}, err
	}
	t.accepted = true
	b.boot(true)
	return t.turn, nil
}

// refuseDeleted refuses a write that begins a turn in a deleted sandbox.
// The stored state decides, not what this node last read: a node that
// took the sandbox over just after another deleted it may have read it
// before the delete.
func (b *box) refuseDeleted(st *sandbox.State) error {
	if st.Sandbox.Status == sandbox.StatusDeleted {
		return sandbox.Errorf(sandbox.EConflict, "sandbox %s is deleted; create a new one", b.id)
	}
	return nil
}

// runTurn writes the turn's turn.started and sends the prompt. A turn not
// yet answered is accepted only once its turn.started is durable; if the
// store refuses it, the turn is forgotten and the error answers the
// request. A turn accepted while queued has its turn.started wait like any
// write; the prompt is then never sent, and stopForStore ends the turn.
func (b *box) runTurn() error {
	t := b.turn
	evs := b.tr.StartTurn(t.turn.ID, t.turn.Input)
	if !t.accepted {
		if err := b.tryWrite(evs, nil); err != nil {
			b.tr.EndTurn(translate.TurnResult{Canceled: true}) // nothing of it reached the log, and nothing will
			b.turn = nil
			return err
		}
		t.accepted = true
	} else if b.emit(evs) != nil {
		t.running, t.turn.Status = true, sandbox.TurnRunning
		return nil
	}
	t.running, t.turn.Status = true, sandbox.TurnRunning
	b.sessionInUse()
	t.start = b.markTurn(startMark(t.turn.ID))
	prompt, refused := b.promptFor(t)
	if refused != nil {
		b.emit(b.endTurn(translate.TurnResult{Err: refused}))
		return nil
	}
	if err := b.conn.PromptBlocks(t.turn.ID, prompt); err != nil {
		b.log().Warn("prompt failed", "err", err)
		b.agentGone(err, false)
		return nil
	}
	b.timers.timeout.Reset(b.c.cfg.TurnTimeout)
	return nil
}

// endTurn completes the current turn: pending permission requests are
// answered cancelled, then the translator closes parts, resolves approvals,
// settles tools and writes exactly one turn.completed.
func (b *box) endTurn(res translate.TurnResult, extra ...*sandbox.Event) []*sandbox.Event {
	if b.turn == nil {
		return extra
	}
	b.approvals.cancelAll(b.respond)
	if b.turn.running {
		res.Changes = b.turnChanges(b.turn)
	} else {
		// A queued turn never reached the agent: it still starts and ends in
		// the log, so every accepted turn has its turn.completed.
		extra = append(extra, b.tr.StartTurn(b.turn.turn.ID, b.turn.turn.Input)...)
	}
	evs := append(extra, b.tr.EndTurn(res)...)
	b.turn = nil
	b.timers.stop()
	return evs
}

// failQueued fails the turn that waited for the agent, and every turn
// queued behind it, when the agent cannot start: the next boot would fail
// the same way.
func (b *box) failQueued(code, msg string) {
	res := translate.TurnResult{Err: &sandbox.ErrorInfo{Code: code, Message: msg}}
	evs := b.endTurn(res)
	b.emit(append(evs, b.endQueue(res)...))
}

func (b *box) respond(req agent.RequestID, result any) {
	if b.conn == nil {
		return
	}
	if err := b.conn.Respond(req, result); err != nil {
		b.log().Warn("answer to agent failed", "err", err)
	}
}

func (b *box) inbound(in agent.Inbound) {
	switch in.Kind {
	case agent.Update:
		b.emit(b.tr.Update(in.Params))
	case agent.Permission:
		if b.turn == nil || !b.turn.running || b.turn.canceled {
			// Asked outside a live turn (late, or after a cancel): there is no
			// one to ask, so the answer is cancelled and nothing is published.
			b.respond(in.Request, cancelledOutcome)
			return
		}
		p, evs := b.tr.RequestPermission(in.Params)
		if p.ApprovalID == "" {
			// Nothing a person could decide on (no option we understand).
			b.respond(in.Request, cancelledOutcome)
			b.emit(evs)
			return
		}
		b.approvals.add(in.Request, p, evs)
		b.emit(evs)
		b.approvals.arm()
	case agent.PromptDone:
		if b.turn == nil || !b.turn.running || in.TurnID != b.turn.turn.ID {
			return // the answer of a turn that already ended
		}
		res := translate.TurnResult{StopReason: in.StopReason, Canceled: b.turn.canceled, Usage: parseUsage(in.Usage)}
		var evs []*sandbox.Event
		var rpcErr *agent.RPCError
		switch {
		case in.Err == nil:
		case b.turn.canceled:
			// The user's cancel decides the turn, whatever the agent says.
			b.log().Info("agent answered a canceled prompt with an error", "turn_id", in.TurnID, "err", in.Err)
		case errors.As(in.Err, &rpcErr):
			// A well-formed refusal, such as the model API's answer to a
			// bad request: the agent is fine, the turn failed, and its
			// reason is worth telling.
			b.log().Warn("agent answered the prompt with an error", "turn_id", in.TurnID, "reply", rpcErr)
			msg := b.promptError(rpcErr)
			res.Err = &sandbox.ErrorInfo{Code: sandbox.ErrAgent, Message: msg}
			evs = b.agentError(msg)
		default:
			b.log().Warn("agent answered the prompt with a malformed result", "turn_id", in.TurnID, "err", in.Err)
			res.Err = &sandbox.ErrorInfo{Code: sandbox.ErrProtocol, Message: "the agent answered the prompt without a stop reason"}
		}
		b.emit(b.endTurn(res, evs...))
	case agent.Exited:
		b.agentGone(in.Err, in.Protocol)
	}
}

// parseUsage reads the token counts an agent may report with its answer.
func parseUsage(raw json.RawMessage) *sandbox.Usage {
	if len(raw) == 0 {
		return nil
	}
	var u struct {
		InputTokens  *int64 `json:"inputTokens"`
		OutputTokens *int64 `json:"outputTokens"`
		TotalTokens  *int64 `json:"totalTokens"`
	}
	if json.Unmarshal(raw, &u) != nil || (u.InputTokens == nil && u.OutputTokens == nil && u.TotalTokens == nil) {
		return nil
	}
	var out sandbox.Usage
	if u.InputTokens != nil {
		out.InputTokens = *u.InputTokens
	}
	if u.OutputTokens != nil {
		out.OutputTokens = *u.OutputTokens
	}
	if u.TotalTokens != nil {
		out.TotalTokens = *u.TotalTokens
	} else {
		out.TotalTokens = out.InputTokens + out.OutputTokens
	}
	return &out
}

// agentGone handles an agent that is no longer there: the running turn fails,
// its approvals fail, and the sandbox waits for the next turn to boot again.
func (b *box) agentGone(cause error, protocol bool) {
	if b.conn == nil {
		return
	}
	b.conn.Close()
	b.setConn(nil)
	b.releaseSlot()
	code, msg := sandbox.ErrAgentExited, "the agent exited unexpectedly"
	if exit := (*agent.ExitError)(nil); errors.As(cause, &exit) && exit.Reason != "" {
		msg = exit.Reason // its limits stopped it, e.g. over its memory
	}
	if protocol {
		code, msg = sandbox.ErrProtocol, "the agent broke the protocol and was stopped"
		if cause != nil {
			msg += ": " + cause.Error()
		}
	}
	b.log().Warn("agent gone", "err", cause, "protocol", protocol)
	evs := b.tr.Error(code, msg)
	evs = b.endTurn(translate.TurnResult{Err: &sandbox.ErrorInfo{Code: sandbox.ErrAgentExited, Message: msg}}, evs...)
	b.setStatus(sandbox.StatusStopped, msg+"; it starts again with the next turn", evs...)
}

func (b *box) cancel(turnID string) (sandbox.Turn, error) {
	if i := b.queuedAt(turnID); i >= 0 {
		return b.cancelQueued(i)
	}
	if b.turn == nil || b.turn.turn.ID != turnID {
		return b.c.store.Turn(context.Background(), b.id, turnID)
	}
	t := b.turn
	if !t.running {
		// A refused write leaves the cancel standing: the turn's end
		// waits in memory and lands, canceled, when the store is back.
		// The request is answered unavailable all the same, so the
		// client asks again and gets the settled turn.
		if err := b.emit(b.endTurn(translate.TurnResult{Canceled: true})); err != nil {
			return sandbox.Turn{}, err
		}
		return b.c.store.Turn(context.Background(), b.id, turnID)
	}
	if t.canceled {
		return t.turn, nil
	}
	t.canceled = true
	if err := b.conn.Cancel(); err != nil {
		b.log().Warn("session/cancel failed", "err", err)
	}
	var evs []*sandbox.Event
	for id, a := range b.approvals.runs {
		b.respond(a.req, cancelledOutcome)
		_, e, err := b.tr.ResolveApproval(id, sandbox.DecisionCanceled, "", sandbox.ReasonTurnCanceled)
		if err == nil {
			evs = append(evs, e...)
		}
		delete(b.approvals.runs, id)
	}
	b.approvals.timer.Stop()
	b.timers.cancel.Reset(cancelGrace)
	if err := b.emit(evs); err != nil {
		return sandbox.Turn{}, err // the cancel stands, as above
	}
	return t.turn, nil
}

func (b *box) cancelOverdue() {
	if b.turn == nil || !b.turn.canceled {
		return
	}
	msg := fmt.Sprintf("the agent did not stop within %s of the cancel and was stopped", cancelGrace)
	b.stopAgent()
	evs := b.endTurn(translate.TurnResult{Canceled: true})
	b.setStatus(sandbox.StatusStopped, msg+"; it starts again with the next turn", evs...)
}

func (b *box) turnTimedOut() {
	if b.turn == nil {
		return
	}
	msg := fmt.Sprintf("the turn ran longer than %s and was stopped", b.c.cfg.TurnTimeout)
	b.stopAgent()
	evs := b.tr.Error(sandbox.ErrTurnTimeout, msg)
	evs = b.endTurn(translate.TurnResult{Err: &sandbox.ErrorInfo{Code: sandbox.ErrTurnTimeout, Message: msg}}, evs...)
	b.setStatus(sandbox.StatusStopped, "the agent was stopped after a turn timeout; it starts again with the next turn", evs...)
}

// stopAgent stops the agent on purpose: its exit is not an error. Close
// cancels the running prompt, answers the permission requests still pending
// and gives the agent its grace before its input closes, so the approvals
// are only forgotten here; the turn's end resolves them in the log.
func (b *box) stopAgent() {
	if b.conn == nil {
		return
	}
	conn := b.conn
	b.setConn(nil)
	b.approvals.forget()
	conn.Close()
	b.releaseSlot()
}

// forgetTurns drops the turn, its approvals and its timers without a word
// in the log: the box lets go of its sandbox (abandon).
func (b *box) forgetTurns() {
	b.turn, b.queue = nil, nil
	b.approvals.forget()
	b.timers.stop()
}

// cancelAndStop stops the agent and ends the turn, if any, as canceled. The
// agent is stopped first because the stop is what tells it the turn is
// over (see agent.Conn.Close); ending the turn before would answer its
// permission requests without the cancel that must precede them. It
// returns the turn's closing events for the caller to emit with its own.
func (b *box) cancelAndStop(res translate.TurnResult) []*sandbox.Event {
	b.stopAgent()
	if b.turn == nil {
		return nil
	}
	return b.endTurn(res)
}

// serverStopped is how a turn ends when the server stops under it: canceled,
// saying so, unless the user canceled it first (then it is the user's
// cancel, as anywhere else).
func (b *box) serverStopped() translate.TurnResult {
	if b.turn == nil || b.turn.canceled {
		return translate.TurnResult{Canceled: true}
	}
	return translate.TurnResult{Stopped: &sandbox.ErrorInfo{
		Code:    sandbox.ErrServerStopped,
		Message: "the server stopped during the turn; send the prompt again to go on",
	}}
}

// remove deletes the sandbox: its agent stops, its running turn ends
// canceled and its files (work, home, tmp) are removed, at once, whether
// or not the store takes writes: a delete is how an operator frees what
// an agent holds, above all while a full disk refuses everything else.
// The record (stopping, the turn's end, deleted) waits like any write
// while the store refuses it, and lands when it takes writes again.
func (b *box) remove() {
	b.deleted = true
	b.write(nil, b.statusMutate(sandbox.StatusStopping, "stopping the agent"))
	evs := b.cancelAndStop(translate.TurnResult{Canceled: true})
	evs = append(evs, b.endQueue(translate.TurnResult{Canceled: true})...)
	b.c.clones.stop(b.id) // what it left is removed once it ends (booted)
	b.removeFiles()
	b.setStatus(sandbox.StatusDeleted, "deleted by request", evs...)
}

// shutdown runs when the coordinator closes: the running turn is completed
// as canceled, with server_stopped as its error, and durable before the
// agent is stopped.
func (b *box) shutdown() {
	evs := b.cancelAndStop(b.serverStopped())
	evs = append(evs, b.endQueue(queueStopped)...)
	if b.booting {
		if res := <-b.bootDone; res.conn != nil {
			res.conn.Close()
		}
		b.booting = false
	}
	if b.deleted {
		b.emit(evs)
	} else {
		b.setStatus(sandbox.StatusStopped, "the server stopped; the agent starts again with the next turn", evs...)
	}
	// One last try for what waits; the store may be back. What it still
	// refuses is left to the next start's recovery.
	b.retryWrites()
	b.dropPending()
}
