package coordinator

import (
	"context"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Decision is the body of an approval decision: decision "approve" or
// "deny", or the option_id of one of the approval's options.
type Decision struct {
	Decision string `json:"decision,omitempty"`
	OptionID string `json:"option_id,omitempty"`
}

// withBox runs fn on the runtime of an existing sandbox.
func (c *Coordinator) withBox(ctx context.Context, id string, fn func(b *box) error) error {
	sb, err := c.store.Sandbox(ctx, id)
	if err != nil {
		return err
	}
	if !c.hasAgents() {
		return sandbox.Errorf(sandbox.EConflict, "this server runs no agents")
	}
	b, err := c.box(id)
	if err != nil {
		return err
	}
	var ferr error
	if err := b.do(ctx, func() {
		if sb.Status == sandbox.StatusDeleted {
			b.deleted = true
		}
		ferr = fn(b)
	}); err != nil {
		return err
	}
	return ferr
}

// DeleteSandbox stops a sandbox's agent, cancels its running turn and marks it
// deleted. Its log stays readable until retention drops it.
func (c *Coordinator) DeleteSandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	if !c.hasAgents() {
		err := c.store.Append(ctx, id, nil, func(st *sandbox.State) error {
			st.Sandbox.Status, st.Sandbox.StatusDetail = sandbox.StatusDeleted, "deleted by request"
			st.Sandbox.UpdatedAt = c.now()
			return nil
		})
		if err != nil {
			return sandbox.Sandbox{}, err
		}
		return c.store.Sandbox(ctx, id)
	}
	err := c.withBox(ctx, id, func(b *box) error {
		if !b.deleted {
			b.remove()
		}
		return nil
	})
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.store.Sandbox(ctx, id)
}

// StartTurn accepts a prompt as a new turn. It runs at once when the agent is
// ready; otherwise it is queued and the agent boots.
func (c *Coordinator) StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	if input == "" {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.EInvalidRequest, "input must be a non-empty string")
	}
	var t sandbox.Turn
	err := c.withBox(ctx, id, func(b *box) (err error) {
		t, err = b.startTurn(input)
		return err
	})
	return t, err
}

// Turn returns a turn of a sandbox, queued ones included.
func (c *Coordinator) Turn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	if _, err := c.store.Sandbox(ctx, id); err != nil {
		return sandbox.Turn{}, err
	}
	if c.hasAgents() {
		var t *sandbox.Turn
		err := c.withBox(ctx, id, func(b *box) error {
			if b.turn != nil && b.turn.turn.ID == turnID {
				cp := b.turn.turn
				t = &cp
			}
			return nil
		})
		if err != nil {
			return sandbox.Turn{}, err
		}
		if t != nil {
			return *t, nil
		}
	}
	return c.store.Turn(ctx, id, turnID)
}

// CancelTurn cancels a turn: the agent gets session/cancel, pending approvals
// are canceled, and the turn completes as canceled when the agent answers (or
// after a grace period without it).
func (c *Coordinator) CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	var t sandbox.Turn
	err := c.withBox(ctx, id, func(b *box) (err error) {
		t, err = b.cancel(turnID)
		return err
	})
	return t, err
}

// Decide resolves a pending approval with the user's decision.
func (c *Coordinator) Decide(ctx context.Context, id, approvalID string, d Decision) (sandbox.Approval, error) {
	var a sandbox.Approval
	err := c.withBox(ctx, id, func(b *box) (err error) {
		a, err = b.decide(approvalID, d)
		return err
	})
	return a, err
}
