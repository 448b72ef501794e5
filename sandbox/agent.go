package sandbox

import (
	"context"
	"io"
)

// Agent is one agent a sandbox may ask for, as GET /v1/agents lists it:
// its name and whether its command resolves on the server (an agent that
// is not available fails to start). Its command and environment stay
// private.
type Agent struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
}

// AgentCheck is what booting one agent as a sandbox would found, step by
// step (GET /v1/agents/{name}/check, the doctor's answer). An agent that
// does not start is Ready false, not an error. It is for the operator, who
// holds the full token: it names the command and the paths it is given,
// which the agents list keeps to the server.
type AgentCheck struct {
	Name  string      `json:"name"`
	Ready bool        `json:"ready"`
	Steps []CheckStep `json:"steps"`
	// DurationMS is how long the boot took, to ready or to its failure.
	DurationMS int64 `json:"duration_ms"`
	// Stderr is the end of what the agent wrote to stderr when it failed
	// (at most 2 KiB, redacted); Fix is what would most likely mend it.
	Stderr string `json:"stderr,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// CheckStep is one step of an agent check and what it found: "command",
// "start", "grants", "confinement", "initialize", "auth", "session/new" or
// "ready".
type CheckStep struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// AgentLog is a sandbox's agent log (what its agent wrote to stderr)
// opened for one reader.
type AgentLog interface {
	// Copy writes the log to w, redacted line by line, and with o.Follow
	// what the agent writes next until ctx ends.
	Copy(ctx context.Context, w io.Writer, o LogOptions) error
}

// LogOptions choose what AgentLog.Copy writes.
type LogOptions struct {
	// Tail starts at the last Tail lines; negative for the whole log.
	// Zero, with Follow, writes only what the agent writes from now on.
	Tail int
	// Follow goes on writing what the agent writes, until ctx ends.
	Follow bool
	// Flush, when set, is called after each batch of lines a follow
	// writes, so they reach the client as they come.
	Flush func() error
}
