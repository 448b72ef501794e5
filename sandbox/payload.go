package sandbox

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Seq is an event id in a resource or payload (last_event_id and friends). It
// is written as a decimal string like the envelope id; 0 means "none".
type Seq uint64

// MarshalJSON writes the id as a decimal string.
func (s Seq) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(s), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a decimal string or a JSON number.
func (s *Seq) UnmarshalJSON(b []byte) error {
	str := string(b)
	if str == "null" {
		*s = 0
		return nil
	}
	if len(str) >= 2 && str[0] == '"' {
		str = str[1 : len(str)-1]
	}
	v, err := strconv.ParseUint(str, 10, 64)
	if err != nil {
		return fmt.Errorf("event id %s: %w", b, err)
	}
	*s = Seq(v)
	return nil
}

// Status values of a sandbox.
const (
	StatusCreating = "creating"
	StatusBooting  = "booting"
	StatusReady    = "ready"
	StatusStopping = "stopping"
	StatusStopped  = "stopped"
	StatusFailed   = "failed"
	StatusDeleted  = "deleted"
)

// Turn statuses.
const (
	TurnQueued    = "queued"
	TurnRunning   = "running"
	TurnSucceeded = "succeeded"
	TurnFailed    = "failed"
	TurnCanceled  = "canceled"
)

// Stop reasons of a completed turn.
const (
	StopEndTurn         = "end_turn"
	StopMaxTokens       = "max_tokens"
	StopMaxTurnRequests = "max_turn_requests"
	StopRefusal         = "refusal"
	StopCanceled        = "canceled"
	StopError           = "error"
)

// Message part kinds.
const (
	PartText      = "text"
	PartReasoning = "reasoning"
)

// Tool kinds and statuses.
const (
	ToolKindRead    = "read"
	ToolKindEdit    = "edit"
	ToolKindDelete  = "delete"
	ToolKindMove    = "move"
	ToolKindSearch  = "search"
	ToolKindExecute = "execute"
	ToolKindThink   = "think"
	ToolKindFetch   = "fetch"
	ToolKindOther   = "other"

	ToolPending   = "pending"
	ToolRunning   = "running"
	ToolCompleted = "completed"
	ToolFailed    = "failed"
	ToolCanceled  = "canceled"
)

// Plan entry statuses and priorities.
const (
	PlanPending    = "pending"
	PlanInProgress = "in_progress"
	PlanCompleted  = "completed"

	PriorityHigh   = "high"
	PriorityMedium = "medium"
	PriorityLow    = "low"
)

// PlanEntry is one entry of an agent's plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority"`
}

// PlanUpdated is the data of plan.updated: the agent's whole plan for the
// turn, at most 100 entries of at most 500 characters each.
type PlanUpdated struct {
	Entries []PlanEntry `json:"entries"`
}

// Approval option kinds, decisions and reasons.
const (
	OptionAllowOnce    = "allow_once"
	OptionAllowAlways  = "allow_always"
	OptionRejectOnce   = "reject_once"
	OptionRejectAlways = "reject_always"

	DecisionApproved = "approved"
	DecisionDenied   = "denied"
	DecisionCanceled = "canceled"
	DecisionFailed   = "failed"

	ReasonUser         = "user"
	ReasonTimeout      = "timeout"
	ReasonTurnCanceled = "turn_canceled"
	ReasonAgentExited  = "agent_exited"

	ApprovalPending = "pending"
	ApprovalDone    = "resolved"
)

// sandbox.error codes.
const (
	ErrAgentStartFailed     = "agent_start_failed"
	ErrAgentExited          = "agent_exited"
	ErrProtocol             = "protocol_error"
	ErrTurnTimeout          = "turn_timeout"
	ErrCoordinatorRestarted = "coordinator_restarted"
	// ErrSessionLost: the agent could not load its earlier session, so a
	// new one was opened and the agent does not remember earlier turns.
	ErrSessionLost = "session_lost"
	// ErrLogFull: the turn's own events outgrew the byte bound of the
	// sandbox's event log (--retention-max-bytes), so it was stopped.
	ErrLogFull = "log_full"
	// ErrDiskFull: the sandbox's files passed --sandbox-disk-max, or the
	// data dir's free space fell under --disk-reserve; the agent was
	// stopped so that it cannot keep writing.
	ErrDiskFull = "disk_full"
	// ErrSourceFailed: the workspace's source (a git repository) could
	// not be fetched; the sandbox is failed.
	ErrSourceFailed = "source_failed"
	// ErrServerStopped: the server stopped during the turn, which it ended
	// canceled though no user canceled it. It is only ever the error of
	// such a turn.completed, never a sandbox.error of its own.
	ErrServerStopped = "server_stopped"
	// ErrInputUnsupported: a turn accepted before its agent booted holds
	// a block the agent, once booted, does not take (an image, an
	// embedded file: its promptCapabilities); only ever the error of a
	// failed turn.completed.
	ErrInputUnsupported = "input_unsupported"
	ErrInternal         = "internal"
)

// SandboxStatus is the data of a transient sandbox.status frame.
type SandboxStatus struct {
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// Input is one element of a turn's input as the log records it: text
// (curated), an image by its media type and decoded size, never its data,
// or a file of the workspace by its relative path.
type Input struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`
	Path      string `json:"path,omitempty"`
}

// InputBlock is one block of a turn's input as a request sends it
// (docs/api.md): {type:"text", text}, {type:"image", media_type, data}
// with data in base64, or {type:"file", path} relative to the workspace.
// Only its Input, without the data, reaches the log.
type InputBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	Path      string `json:"path,omitempty"`
}

// DefaultTurnImageMax is the decoded size one image, or one file, of a
// turn's input may have on a server not given another
// (--turn-image-max-size).
const DefaultTurnImageMax = 5 << 20

// TextInput is the input of a turn prompted with plain text.
func TextInput(text string) []Input { return []Input{{Type: "text", Text: text}} }

// TurnStarted is the data of turn.started.
type TurnStarted struct {
	Input []Input `json:"input"`
}

// TurnQueuedData is the data of turn.queued: a turn accepted while another
// runs, to start when the turns before it have ended. Input is curated as
// turn.started's; Position is its place in the queue when it was accepted,
// 1 for the next to start. The turn later has its turn.started and
// turn.completed, or only a turn.completed when it ends without running.
type TurnQueuedData struct {
	Input    []Input `json:"input"`
	Position int     `json:"position"`
}

// ErrorInfo is a public {code, message} pair.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Usage is the token usage an agent reported for a turn, when it did.
//
// The token counts are those of the prompt answer (0 when the agent gave
// none, and in turn.usage, which comes before it). ContextTokens and
// ContextWindow are what the agent last said of its context window during
// the turn (ACP usage_update: used, size), for agents such as Codex that
// report usage only that way; they are left out when it said nothing. Cost
// is the last cost the agent reported (usage_update's cost), left out when
// it reported none.
type Usage struct {
	InputTokens   int64 `json:"input_tokens"`
	OutputTokens  int64 `json:"output_tokens"`
	TotalTokens   int64 `json:"total_tokens"`
	ContextTokens int64 `json:"context_tokens,omitempty"`
	ContextWindow int64 `json:"context_window,omitempty"`
	Cost          *Cost `json:"cost,omitempty"`
}

// Cost is an amount of money an agent says its session has cost so far:
// Amount is not negative, Currency an ISO 4217 code ("USD").
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// Clone returns a deep copy of the usage; nil stays nil.
func (u *Usage) Clone() *Usage {
	if u == nil {
		return nil
	}
	c := *u
	c.Cost = ClonePtr(u.Cost)
	return &c
}

// TurnUsage is the data of turn.usage: the running turn's usage so far,
// which replaces the last. turn.completed carries the turn's last figures.
type TurnUsage struct {
	Usage Usage `json:"usage"`
}

// TurnCompleted is the data of turn.completed.
type TurnCompleted struct {
	Status     string     `json:"status"`
	StopReason string     `json:"stop_reason"`
	Error      *ErrorInfo `json:"error"`
	DurationMS int64      `json:"duration_ms"`
	Usage      *Usage     `json:"usage"`
	// Changes is what the turn changed in the workspace; null when it
	// could not be recorded (the turn never ran, or its end was settled
	// by a coordinator that restarted).
	Changes *Changes `json:"changes"`
}

// MaxChangedFiles is how many files Changes lists; the counts cover all.
const MaxChangedFiles = 1000

// The kinds of FileChange.Change.
const (
	ChangeAdded    = "added"
	ChangeModified = "modified"
	ChangeDeleted  = "deleted"
)

// Changes sums up what a turn changed in the workspace: the counts of
// every change, and the files sorted by path, at most MaxChangedFiles of
// them (Truncated tells that more changed).
type Changes struct {
	Added     int          `json:"added"`
	Modified  int          `json:"modified"`
	Deleted   int          `json:"deleted"`
	Files     []FileChange `json:"files"`
	Truncated bool         `json:"truncated"`
}

// FileChange is one file's change; Path is relative to the workspace,
// with forward slashes.
type FileChange struct {
	Path   string `json:"path"`
	Change string `json:"change"`
}

// WorkspaceReverted is the data of workspace.reverted: the workspace was
// put back as it was when turn TurnID started.
type WorkspaceReverted struct {
	TurnID string `json:"turn_id"`
}

// MessageUpdated is the data of message.updated: the whole part so far.
type MessageUpdated struct {
	MessageID string `json:"message_id"`
	PartID    string `json:"part_id"`
	Index     int    `json:"index"`
	Kind      string `json:"kind"`
	Text      string `json:"text"`
}

// Part is one part of a completed message.
type Part struct {
	PartID string `json:"part_id"`
	Index  int    `json:"index"`
	Kind   string `json:"kind"`
	Text   string `json:"text"`
}

// MessageCompleted is the data of message.completed.
type MessageCompleted struct {
	MessageID string `json:"message_id"`
	Parts     []Part `json:"parts"`
	Text      string `json:"text"`
}

// Location is a place a tool touches, relative to the sandbox directory.
type Location struct {
	Path string `json:"path"`
	Line *int   `json:"line"`
}

// ToolUpdated is the data of tool.updated: the whole curated tool state.
type ToolUpdated struct {
	ToolCallID string     `json:"tool_call_id"`
	Title      string     `json:"title"`
	Kind       string     `json:"kind"`
	Status     string     `json:"status"`
	Locations  []Location `json:"locations"`
	// Output is the tool's last tool.output data, in a state and a
	// snapshot only: a tool.updated event never carries it.
	Output *ToolOutput `json:"output,omitempty"`
}

// MaxToolOutputBytes bounds the text of a tool.output: the tail of what a
// command printed that a screen shows.
const MaxToolOutputBytes = 16 << 10

// ToolOutput is the data of tool.output: the last MaxToolOutputBytes of
// what a command the agent ran printed, escape sequences and control
// bytes but newline and tab left out, redacted. Truncated says earlier
// output was dropped; ExitCode is nil until the command ended, and when
// the agent did not say how.
type ToolOutput struct {
	ToolCallID string `json:"tool_call_id"`
	Text       string `json:"text"`
	Truncated  bool   `json:"truncated"`
	ExitCode   *int   `json:"exit_code"`
}

// Option is one choice of an approval.
type Option struct {
	OptionID string `json:"option_id"`
	Kind     string `json:"kind"`
	Label    string `json:"label"`
}

// ApprovalRequested is the data of approval.requested.
type ApprovalRequested struct {
	ApprovalID string    `json:"approval_id"`
	ToolCallID string    `json:"tool_call_id"`
	Title      string    `json:"title"`
	Kind       string    `json:"kind"`
	Options    []Option  `json:"options"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// MarshalJSON writes expires_at with millisecond precision like every ts.
func (a ApprovalRequested) MarshalJSON() ([]byte, error) {
	type plain ApprovalRequested
	return json.Marshal(struct {
		plain
		ExpiresAt string `json:"expires_at"`
	}{plain(a), a.ExpiresAt.UTC().Format(TimeFormat)})
}

// ApprovalResolved is the data of approval.resolved.
type ApprovalResolved struct {
	ApprovalID string `json:"approval_id"`
	Decision   string `json:"decision"`
	OptionID   string `json:"option_id"`
	Reason     string `json:"reason"`
}

// SandboxError is the data of sandbox.error.
type SandboxError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Snapshot is the data of the snapshot frame.
type Snapshot struct {
	Sandbox       Sandbox             `json:"sandbox"`
	Turn          *Turn               `json:"turn"`
	Messages      []MessageUpdated    `json:"messages"`
	Tools         []ToolUpdated       `json:"tools"`
	Approvals     []ApprovalRequested `json:"approvals"`
	LastEventID   Seq                 `json:"last_event_id"`
	OldestEventID Seq                 `json:"oldest_event_id"`
	PrunedThrough Seq                 `json:"pruned_through"`
	// ToolsOmitted and MessagesOmitted count the tools and message parts
	// of the turn that the snapshot leaves out to stay within
	// SnapshotMaxBytes (State.Snapshot says which); the JSON events pages
	// have them.
	ToolsOmitted    int `json:"tools_omitted"`
	MessagesOmitted int `json:"messages_omitted"`
	// Plan is the turn's last plan.updated data, null before one.
	Plan *PlanUpdated `json:"plan"`
}
