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

// DeleteSandbox stops a sandbox's agent, cancels its running turn and marks it
// deleted. Its log stays readable until retention drops it.
func (c *Coordinator) DeleteSandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
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

// StartTurn queues a prompt as a new turn of a sandbox.
func (c *Coordinator) StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error) {
	return sandbox.Turn{}, sandbox.Errorf(sandbox.EConflict, "this server runs no agents")
}

// CancelTurn cancels a running or queued turn.
func (c *Coordinator) CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error) {
	return sandbox.Turn{}, sandbox.Errorf(sandbox.EConflict, "this server runs no agents")
}

// Decide resolves a pending approval.
func (c *Coordinator) Decide(ctx context.Context, id, approvalID string, d Decision) (sandbox.Approval, error) {
	return sandbox.Approval{}, sandbox.Errorf(sandbox.EConflict, "this server runs no agents")
}
