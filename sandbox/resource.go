package sandbox

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Sandbox is the public sandbox resource. Env and secret values are never
// part of it; the coordinator keeps them in its private Config.
type Sandbox struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Status        string            `json:"status"`
	StatusDetail  string            `json:"status_detail"`
	Agent         string            `json:"agent"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	Metadata      map[string]string `json:"metadata"`
	CurrentTurn   *Turn             `json:"current_turn"`
	LastEventID   Seq               `json:"last_event_id"`
	OldestEventID Seq               `json:"oldest_event_id"`
	PrunedThrough Seq               `json:"pruned_through"`
	// Source is where the workspace came from, when it came from
	// somewhere (docs/workspace.md); its URL never holds a credential.
	Source *Source `json:"source,omitempty"`
	// ToolOutput says whether the log has the output of the commands the
	// agent runs (tool.output), as the sandbox was created.
	ToolOutput bool `json:"tool_output"`
	// MCPServers are the MCP servers its agent is given (mcp.go): names
	// of env variables and headers, never their values.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
	// QueuedTurns are the turns waiting behind the current one, first to
	// start first; left out when none wait.
	QueuedTurns []Turn `json:"queued_turns,omitempty"`
	// Config is the agent's mode and model and its choices (config.go);
	// left out while none was asked for or announced.
	Config *AgentConfig `json:"config,omitempty"`
}

// Settled reports whether a sandbox is as a restart of the server leaves
// it: no current or queued turn and an agent that was not running (or
// starting, or stopping), so recovery has nothing to close. Pending
// approvals belong to the current turn: a turn's end resolves them in the
// same append.
func Settled(sb Sandbox) bool {
	if sb.CurrentTurn != nil || len(sb.QueuedTurns) > 0 {
		return false
	}
	switch sb.Status {
	case StatusCreating, StatusBooting, StatusReady, StatusStopping:
		return false
	}
	return true
}

// Source is where a sandbox's workspace comes from at create.
type Source struct {
	Git *GitSource `json:"git,omitempty"`
}

// GitSource is a git repository cloned into the workspace before the
// agent boots: URL (https or http, without credentials), Ref
// (a branch, a tag or a commit; the remote's default branch when empty),
// and Depth (the commits of history to fetch; 0 fetches it all).
type GitSource struct {
	URL   string `json:"url"`
	Ref   string `json:"ref,omitempty"`
	Depth int    `json:"depth,omitempty"`
}

// Turn is the public turn resource.
type Turn struct {
	ID          string     `json:"id"`
	Object      string     `json:"object"`
	SandboxID   string     `json:"sandbox_id"`
	Status      string     `json:"status"`
	Input       []Input    `json:"input"`
	CreatedAt   time.Time  `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at"`
	StopReason  *string    `json:"stop_reason"`
	// Usage is the turn's last turn.usage, then its turn.completed usage
	// when that has one; left out before either.
	Usage *Usage `json:"usage,omitempty"`
}

// Done reports whether the turn has settled.
func (t *Turn) Done() bool {
	return t.Status == TurnSucceeded || t.Status == TurnFailed || t.Status == TurnCanceled
}

// Approval is the public approval resource.
type Approval struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	SandboxID string  `json:"sandbox_id"`
	TurnID    string  `json:"turn_id"`
	Status    string  `json:"status"`
	Decision  *string `json:"decision"`
	OptionID  *string `json:"option_id"`
}

// Id prefixes of docs/events.md.
const (
	PrefixSandbox  = "c_"
	PrefixTurn     = "turn_"
	PrefixMessage  = "msg_"
	PrefixPart     = "part_"
	PrefixTool     = "tool_"
	PrefixApproval = "appr_"
)

// idSource makes every id of the process. The stores list sandboxes in key
// order and call it creation order, so ids must sort as they were made even
// within one millisecond: the monotonic entropy counts up inside a
// millisecond instead of drawing afresh, and the lock makes that one order
// across goroutines. ms is the last timestamp used, so that a clock stepping
// back cannot give a later id a smaller time.
var idSource = struct {
	sync.Mutex
	ms      uint64
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.Reader, 0)}

// NewID returns a fresh id with the given prefix: a lower-case ULID. Ids
// made by one process are unique and strictly increasing in the order they
// were made, so ids of one kind sort by creation.
func NewID(prefix string) string {
	s := &idSource
	s.Lock()
	ms := max(ulid.Now(), s.ms)
	id, err := ulid.New(ms, s.entropy)
	if err != nil {
		// The millisecond's entropy ran out (or the random source failed):
		// the next millisecond starts afresh and still sorts after.
		ms++
		id = ulid.MustNew(ms, s.entropy)
	}
	s.ms = ms
	s.Unlock()
	return prefix + strings.ToLower(id.String())
}

// Marks returns the watermarks of the sandbox's log.
func (sb Sandbox) Marks() Marks {
	return Marks{OldestEventID: sb.OldestEventID, PrunedThrough: sb.PrunedThrough, LastEventID: sb.LastEventID}
}
