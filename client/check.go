package client

import (
	"context"
	"net/http"
)

// AgentCheck is what booting an agent as a sandbox of it would be booted
// found, step by step (GET /v1/agents/{name}/check). An agent that does not
// start is Ready false, not an error; Stderr and Fix then say why and what
// to do.
type AgentCheck struct {
	Name       string      `json:"name"`
	Ready      bool        `json:"ready"`
	Steps      []CheckStep `json:"steps"`
	DurationMS int64       `json:"duration_ms"`
	Stderr     string      `json:"stderr,omitempty"`
	Fix        string      `json:"fix,omitempty"`
}

// CheckStep is one step of an agent check: "command", "grants",
// "confinement", "start", "initialize", "auth", "session/new" or "ready".
type CheckStep struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// CheckAgent boots the agent registered as name in a throwaway sandbox on
// the server and reports what it found. It needs the server token and
// takes as long as the agent's boot.
func (c *Client) CheckAgent(ctx context.Context, name string) (AgentCheck, error) {
	var out AgentCheck
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "agents", name, "check"), nil, http.StatusOK, &out)
	return out, err
}
