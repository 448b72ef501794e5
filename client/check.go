package client

import (
	"context"
	"net/http"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// AgentCheck is the answer of an agent check, step by step; CheckStep is
// one of its steps.
type (
	AgentCheck = sandbox.AgentCheck
	CheckStep  = sandbox.CheckStep
)

// CheckAgent boots the agent registered as name in a throwaway sandbox on
// the server and reports what it found. It needs the server token and
// takes as long as the agent's boot.
func (c *Client) CheckAgent(ctx context.Context, name string) (AgentCheck, error) {
	var out AgentCheck
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "agents", name, "check"), nil, http.StatusOK, &out)
	return out, err
}
