package coordinator

import (
	"context"
	"fmt"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Recover settles what a previous run of the server left open: every turn
// that was queued or running is completed as failed after a sandbox.error
// coordinator_restarted, its pending approvals are resolved as failed, and
// sandboxes whose agent was running are marked stopped (the agent boots again
// with the next turn). Call it once, before serving.
func (c *Coordinator) Recover(ctx context.Context) error {
	after := ""
	for {
		list, more, err := c.store.Sandboxes(ctx, after, 100)
		if err != nil {
			return err
		}
		for _, sb := range list {
			after = sb.ID
			if err := c.recoverOne(ctx, sb.ID); err != nil {
				return fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
		}
		if !more {
			return nil
		}
	}
}

func (c *Coordinator) recoverOne(ctx context.Context, id string) error {
	st, err := c.store.State(ctx, id)
	if err != nil {
		return err
	}
	now := c.now()
	var evs []*sandbox.Event
	add := func(typ sandbox.Type, turnID string, data any) {
		evs = append(evs, &sandbox.Event{Type: typ, TS: now, SandboxID: id, TurnID: turnID, Data: data})
	}
	const msg = "the server restarted while this turn was open"
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
				add(sandbox.TypeToolUpdated, cur.ID, &t)
			}
		}
		for _, m := range completedMessages(st.Messages) {
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
	status, detail := st.Sandbox.Status, st.Sandbox.StatusDetail
	switch status {
	case sandbox.StatusCreating, sandbox.StatusBooting, sandbox.StatusReady:
		status, detail = sandbox.StatusStopped, "the server restarted; the agent starts again with the next turn"
	case sandbox.StatusStopping:
		status, detail = sandbox.StatusDeleted, "deleted by request"
	}
	if len(evs) == 0 && status == st.Sandbox.Status {
		return nil
	}
	err = c.store.Append(ctx, id, evs, func(st *sandbox.State) error {
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

// completedMessages groups the latest part snapshots of a turn into messages,
// in the order their first part appeared.
func completedMessages(parts []sandbox.MessageUpdated) []*sandbox.MessageCompleted {
	var out []*sandbox.MessageCompleted
	byID := map[string]*sandbox.MessageCompleted{}
	for _, p := range parts {
		m := byID[p.MessageID]
		if m == nil {
			m = &sandbox.MessageCompleted{MessageID: p.MessageID}
			byID[p.MessageID] = m
			out = append(out, m)
		}
		m.Parts = append(m.Parts, sandbox.Part{PartID: p.PartID, Index: p.Index, Kind: p.Kind, Text: p.Text})
	}
	for _, m := range out {
		var sb strings.Builder
		for _, p := range m.Parts {
			if p.Kind == sandbox.PartText {
				sb.WriteString(p.Text)
			}
		}
		m.Text = sb.String()
	}
	return out
}
