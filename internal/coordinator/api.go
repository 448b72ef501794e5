package coordinator

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// call runs an operation on the runtime of an existing sandbox, where its
// placement has it (see placement.go).
func (c *Coordinator) call(ctx context.Context, call cluster.Call) (any, error) {
	// Every call writes: none is taken while the store refuses writes,
	// but a delete, which frees what the sandbox holds at once and has
	// its record follow (box.remove).
	if err := c.Writable(); err != nil && call.Op != cluster.OpDelete {
		return nil, err
	}
	sb, err := c.store.Sandbox(ctx, call.SandboxID)
	if err != nil {
		return nil, err
	}
	return c.runtimes.call(ctx, sb, call)
}

// exec runs call on b, this node's runtime of sb.
func (c *Coordinator) exec(ctx context.Context, b *box, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	var (
		v    any
		ferr error
	)
	if err := b.do(ctx, func() {
		if !c.current(b) {
			ferr = errMoved // retired since b was found: the lease lapsed
			return
		}
		if sb.Status == sandbox.StatusDeleted {
			b.deleted = true
		}
		if b.writes.waiting() && call.Op != cluster.OpDelete {
			// Its writes wait for the store: nothing goes on top of them.
			ferr = b.writes.err()
			return
		}
		switch call.Op {
		case cluster.OpStartTurn:
			v, ferr = b.startTurn(call.Input, call.Blocks, call.Queue)
		case cluster.OpCancelTurn:
			v, ferr = b.cancel(call.TurnID)
		case cluster.OpDecide:
			if call.Decision == nil {
				ferr = sandbox.Errorf(sandbox.EInvalidRequest, "a decision is required")
				return
			}
			v, ferr = b.decide(call.ApprovalID, *call.Decision)
		case cluster.OpRevert:
			v, ferr = b.revert(call.TurnID)
		case cluster.OpConfig:
			if call.Config == nil {
				ferr = sandbox.Errorf(sandbox.EInvalidRequest, "a config is required")
				return
			}
			v, ferr = b.configure(*call.Config)
		case cluster.OpDelete:
			if !b.deleted {
				b.remove()
			}
			if b.writes.waiting() {
				v = b.deletedView(sb) // the store has not got it yet
			}
		default:
			ferr = sandbox.Errorf(sandbox.EInvalidRequest, "unknown operation %q", call.Op)
		}
	}); err != nil {
		return nil, err
	}
	if ferr != nil || call.Op != cluster.OpDelete {
		return v, ferr
	}
	// Nothing runs for a deleted sandbox: its lease is of no more use.
	if err := c.place.release(ctx, sb.ID); err != nil {
		c.log.Warn("cluster: release of a deleted sandbox", "sandbox_id", sb.ID, "err", err)
	}
	if v != nil {
		return v, nil
	}
	return c.store.Sandbox(ctx, sb.ID)
}

// DeleteSandbox stops a sandbox's agent, cancels its running turn, removes
// its files and marks it deleted, also while the store refuses writes (the
// record follows). Its log stays readable until retention drops it.
func (c *Coordinator) DeleteSandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return c.runtimes.delete(ctx, id)
}

// StartTurn accepts a prompt as a new turn. It runs at once when the agent is
// ready; otherwise it is queued and the agent boots.
func (c *Coordinator) StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	if input == "" {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.EInvalidRequest, "input must be a non-empty string")
	}
	return callAs[sandbox.Turn](ctx, c, cluster.Call{Op: cluster.OpStartTurn, SandboxID: id, Input: input})
}

// QueueTurn is StartTurn for a turn that may wait: while another turn is
// open it is queued behind it (queue.go) instead of refused.
func (c *Coordinator) QueueTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	if input == "" {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.EInvalidRequest, "input must be a non-empty string")
	}
	return callAs[sandbox.Turn](ctx, c, cluster.Call{Op: cluster.OpStartTurn, SandboxID: id, Input: input, Queue: true})
}

// Turn returns a turn of a sandbox, queued ones included. Any node
// answers: a turn queued on another node is in the sandbox's current_turn
// until it starts.
func (c *Coordinator) Turn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	if _, err := c.store.Sandbox(ctx, id); err != nil {
		return sandbox.Turn{}, err
	}
	if b := c.existingBox(id); b != nil {
		var t *sandbox.Turn
		err := b.do(ctx, func() {
			if b.turn != nil && b.turn.turn.ID == turnID {
				cp := b.turn.turn
				t = &cp
			}
		})
		if err != nil {
			return sandbox.Turn{}, err
		}
		if t != nil {
			return *t, nil
		}
	}
	t, err := c.store.Turn(ctx, id, turnID)
	if sandbox.IsType(err, sandbox.ENotFound) {
		if q, ok := c.place.queued(ctx, id, turnID); ok {
			return q, nil
		}
	}
	return t, err
}

// CancelTurn cancels a turn: the agent gets session/cancel, pending approvals
// are canceled, and the turn completes as canceled when the agent answers (or
// after a grace period without it).
func (c *Coordinator) CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	return callAs[sandbox.Turn](ctx, c, cluster.Call{Op: cluster.OpCancelTurn, SandboxID: id, TurnID: turnID})
}

// Decide resolves a pending approval with the user's decision.
func (c *Coordinator) Decide(ctx context.Context, id, approvalID string, d sandbox.Decision) (sandbox.Approval, error) {
	return callAs[sandbox.Approval](ctx, c, cluster.Call{Op: cluster.OpDecide, SandboxID: id, ApprovalID: approvalID, Decision: &d})
}

// callAs runs call and returns its answer as a T, whether it ran here or
// came back as JSON from the holder.
func callAs[T any](ctx context.Context, c *Coordinator, call cluster.Call) (T, error) {
	var zero T
	v, err := c.call(ctx, call)
	if err != nil {
		return zero, err
	}
	switch v := v.(type) {
	case T:
		return v, nil
	case json.RawMessage:
		var out T
		if err := json.Unmarshal(v, &out); err != nil {
			return zero, fmt.Errorf("decode the answer of a forwarded %s: %w", call.Op, err)
		}
		return out, nil
	}
	return zero, fmt.Errorf("%s answered %T", call.Op, v)
}
