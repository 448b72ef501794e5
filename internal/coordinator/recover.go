package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// Recover settles what a previous run of the server left open: every turn
// that was queued or running is completed as failed after a sandbox.error
// coordinator_restarted (a turn queued behind another without the error:
// it never started), its pending approvals are resolved as failed, and
// sandboxes whose agent was running are marked stopped (the agent boots again
// with the next turn). It also removes the scratch sandboxes of agents
// checks that run left unfinished. Call it once, before serving.
//
// With a cluster, the sandboxes of other live nodes are theirs: only those
// whose node went away (this node's earlier run among them) are settled,
// as the sweep does.
func (c *Coordinator) Recover(ctx context.Context) error {
	c.removeCheckLeftovers()
	return c.place.recover(ctx)
}

// unsettledLister is what a store may offer recovery: the ids of the
// sandboxes that are not sandbox.Settled, kept apart so that a start reads
// only those instead of every sandbox's record (boltstore keeps them in a
// bucket of their own).
type unsettledLister interface {
	Unsettled(ctx context.Context) ([]string, error)
}

// recoverAll settles every sandbox of the store as left by a restart.
func (c *Coordinator) recoverAll(ctx context.Context) error {
	if u, ok := c.store.(unsettledLister); ok {
		ids, err := u.Unsettled(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.recoverOne(ctx, id, serverRestarted); err != nil {
				return fmt.Errorf("sandbox %s: %w", id, err)
			}
		}
		return nil
	}
	after := ""
	for {
		list, more, err := c.store.Sandboxes(ctx, after, 100)
		if err != nil {
			return err
		}
		for _, sb := range list {
			after = sb.ID
			// The listing alone shows a sandbox that recovery leaves as it
			// is, whose state need not be read.
			if sandbox.Settled(sb) {
				continue
			}
			if err := c.recoverOne(ctx, sb.ID, serverRestarted); err != nil {
				return fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
		}
		if !more {
			return nil
		}
	}
}

// settleReason is what the log says about the turns a recovery ends and
// the agent that is gone.
type settleReason struct {
	turn   string // the message of the sandbox.error and of turn.completed
	status string // the detail of the sandbox's stopped status
}

var serverRestarted = settleReason{
	turn:   "the server restarted while this turn was open",
	status: "the server restarted; the agent starts again with the next turn",
}

// errStateMoved aborts a recovery whose state changed after it was read.
var errStateMoved = errors.New("the sandbox's state changed during recovery")

// recoverOne settles one sandbox. It reads the state, then appends what
// closes it on the condition that nothing was written in between; if
// something was (another node settling the same sandbox), it looks again.
func (c *Coordinator) recoverOne(ctx context.Context, id string, why settleReason) error {
	for attempt := 1; ; attempt++ {
		err := c.recoverOnce(ctx, id, why)
		if !errors.Is(err, errStateMoved) || attempt == 3 {
			return err
		}
	}
}

func (c *Coordinator) recoverOnce(ctx context.Context, id string, why settleReason) error {
	st, err := c.store.State(ctx, id)
	if err != nil {
		return err
	}
	now := c.now()
	var evs []*sandbox.Event
	add := func(typ sandbox.Type, turnID string, data any) {
		evs = append(evs, &sandbox.Event{Type: typ, TS: now, SandboxID: id, TurnID: turnID, Data: data})
	}
	msg := why.turn
	cur := st.Sandbox.CurrentTurn
	if cur != nil {
		if cur.Status == sandbox.TurnQueued {
			add(sandbox.TypeTurnStarted, cur.ID, &sandbox.TurnStarted{Input: cur.Input})
		}
		add(sandbox.TypeSandboxError, cur.ID, &sandbox.SandboxError{Code: sandbox.ErrCoordinatorRestarted, Message: msg})
	}
	turnID := ""
	if cur != nil {
		turnID = cur.ID
	}
	for _, a := range st.Approvals {
		add(sandbox.TypeApprovalResolved, turnID, &sandbox.ApprovalResolved{
			ApprovalID: a.ApprovalID, Decision: sandbox.DecisionFailed, Reason: sandbox.ReasonAgentExited})
	}
	if cur != nil && st.Turn != nil && st.Turn.ID == cur.ID {
		for _, t := range st.Tools {
			if t.Status == sandbox.ToolPending || t.Status == sandbox.ToolRunning {
				t.Status = sandbox.ToolFailed
				t.Output = nil // the state's, never a tool.updated's
				add(sandbox.TypeToolUpdated, cur.ID, &t)
			}
		}
		// The same rule as a turn that ends while the server runs: at
		// most one message.completed, the last message with text.
		if m := translate.FinalMessage(st.Messages); m != nil {
			add(sandbox.TypeMessageCompleted, cur.ID, m)
		}
	}
	if cur != nil {
		add(sandbox.TypeTurnCompleted, cur.ID, &sandbox.TurnCompleted{
			Status: sandbox.TurnFailed, StopReason: sandbox.StopError,
			Error:      &sandbox.ErrorInfo{Code: sandbox.ErrCoordinatorRestarted, Message: msg},
			DurationMS: now.Sub(cur.CreatedAt).Milliseconds(),
		})
	}
	// Turns queued behind it never ran: a restart does not run them
	// (queue.go), it ends them as it ends the open one.
	for _, q := range st.Sandbox.QueuedTurns {
		add(sandbox.TypeTurnCompleted, q.ID, &sandbox.TurnCompleted{
			Status: sandbox.TurnFailed, StopReason: sandbox.StopError,
			Error:      &sandbox.ErrorInfo{Code: sandbox.ErrCoordinatorRestarted, Message: msg},
			DurationMS: now.Sub(q.CreatedAt).Milliseconds(),
		})
	}
	status, detail := st.Sandbox.Status, st.Sandbox.StatusDetail
	switch status {
	case sandbox.StatusCreating, sandbox.StatusBooting, sandbox.StatusReady:
		status, detail = sandbox.StatusStopped, why.status
	case sandbox.StatusStopping:
		status, detail = sandbox.StatusDeleted, "deleted by request"
	}
	if len(evs) == 0 && status == st.Sandbox.Status {
		return nil
	}
	seen := st.Sandbox
	err = c.store.Append(ctx, id, evs, func(st *sandbox.State) error {
		if got := st.Sandbox; got.LastEventID != seen.LastEventID || got.Status != seen.Status || turnID != currentTurnID(got) {
			return errStateMoved
		}
		st.Sandbox.Status, st.Sandbox.StatusDetail = status, detail
		st.Sandbox.UpdatedAt = now
		return nil
	})
	if err != nil {
		return err
	}
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case *sandbox.TurnCompleted:
			c.cfg.Observer.TurnCompleted(d.Status)
		case *sandbox.ApprovalResolved:
			c.cfg.Observer.ApprovalResolved(d.Decision)
		}
	}
	return nil
}

func currentTurnID(sb sandbox.Sandbox) string {
	if sb.CurrentTurn == nil {
		return ""
	}
	return sb.CurrentTurn.ID
}
