package translate

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Defaults of Config.
const (
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultApprovalTTL   = 10 * time.Minute
)

// Keys of Stats.Dropped besides the names of ignored update kinds.
const (
	DropOutsideTurn    = "outside_turn"
	DropMalformed      = "malformed"
	DropNonTextContent = "non_text_content"
	DropTruncated      = "truncated"
	DropUnknownOption  = "unknown_option_kind"
	DropNoOptions      = "permission_without_options"
	DropPlanEntries    = "plan_entries_over_100"
	DropUnknown        = "unknown"
)

// maxDropKeys bounds Stats.Dropped: an agent inventing a new update kind per
// notification must not grow it without end.
const maxDropKeys = 64

// Config configures the Translator of one sandbox.
type Config struct {
	SandboxID string
	// Dir is the sandbox working directory (absolute), the agent's cwd. Tool
	// locations are made relative to it and locations outside it are left
	// out; in every outgoing string a path under it is rewritten relative to
	// it.
	Dir string
	// DataDir is the server's data directory (absolute). In every outgoing
	// string a path under it but not under Dir becomes DataDirPlaceholder.
	DataDir string
	// Secrets are values redacted as [REDACTED] in every outgoing string;
	// values shorter than MinSecretLen are ignored.
	Secrets []string
	// FlushInterval is the coalescing interval of message.updated;
	// DefaultFlushInterval when zero or negative.
	FlushInterval time.Duration
	// ApprovalTTL sets expires_at = now + ApprovalTTL; DefaultApprovalTTL
	// when zero or negative.
	ApprovalTTL time.Duration
	Now         func() time.Time           // time.Now when nil
	NewID       func(prefix string) string // sandbox.NewID when nil
	// ToolOutput turns on tool.output: the output of the commands the
	// agent runs, which it sends only to a client that asked for it
	// (tooloutput.go). Off, the agent's _meta is never read.
	ToolOutput bool
}

// Pending is an approval waiting for a decision.
type Pending struct {
	ApprovalID string
	// AgentOptions maps our option_id to the agent's optionId.
	AgentOptions map[string]string
	ExpiresAt    time.Time
}

// AgentOutcome is what to answer the agent's session/request_permission:
// {"outcome":{"outcome":"selected","optionId":OptionID}}, or
// {"outcome":{"outcome":"cancelled"}} when Cancelled.
type AgentOutcome struct {
	Cancelled bool
	OptionID  string
}

// TurnResult is how a turn ended, as the coordinator saw it.
type TurnResult struct {
	// StopReason is the ACP stopReason, "" when the prompt never answered.
	StopReason string
	// Canceled means the user canceled the turn: its status is canceled
	// whatever the agent answered (even end_turn).
	Canceled bool
	// Stopped says why the server, not the user, canceled the turn (it
	// stopped while the turn ran): status canceled, stop_reason canceled,
	// and turn.completed.error is Stopped, so a client can tell it from a
	// cancel of its own. Canceled wins over it, and it over Err.
	Stopped *sandbox.ErrorInfo
	// Err is set when the turn failed (agent exited, timeout, protocol
	// error, restart): status failed, stop_reason error.
	Err *sandbox.ErrorInfo
	// Usage is the token usage the prompt answer reported, nil when it
	// reported none; turn.completed shows it as is.
	Usage *sandbox.Usage
	// Changes is what the turn changed in the workspace, nil when it was
	// not recorded; its paths are redacted like every string.
	Changes *sandbox.Changes
}

// Stats counts what the Translator did not forward.
type Stats struct {
	// Dropped counts ignored update kinds by name, unknown kinds (by name
	// while there is room, else under "unknown"), and the Drop* keys.
	Dropped    map[string]int
	Redactions int // regions replaced by [REDACTED]
	Chunks     int // message and thought chunks received within turns
}

// Translator turns the ACP traffic of one sandbox into public events. It
// lives across turns. It is not safe for concurrent use: the coordinator
// calls it from the one goroutine that owns the sandbox.
type Translator struct {
	sandboxID string
	dirs      []string // Dir as given and symlink-resolved
	interval  time.Duration
	ttl       time.Duration
	now       func() time.Time
	newID     func(string) string
	red       *redactor
	stats     Stats
	// toolOutput is Config.ToolOutput.
	toolOutput bool

	turnID  string // "" outside a turn
	started time.Time

	// Per turn.
	parts   []*part             // in the order they opened
	byAgent map[string]*message // agent messageId -> message
	cur     *message
	open    *part
	tools   map[string]*tool // agent toolCallId -> tool
	// finished are agent toolCallIds of tools that finished, oldest first,
	// so the oldest can be forgotten (see keptFinishedTools); toolOrder
	// numbers the tools in the order they were announced.
	finished  []string
	toolOrder int
	pending   []*approval
	usage     liveUsage // the turn's usage_update so far
	// The turn's last plan.updated entries, so an unchanged plan is not
	// sent again.
	planSent bool
	lastPlan []sandbox.PlanEntry
	// growing are tools whose output waits for the flush interval.
	growing []*tool

	// config is the agent config last curated (config.go), across turns.
	config *sandbox.AgentConfig

	// Ids of approvals already resolved, so a second resolution is a
	// conflict rather than not found.
	resolved map[string]bool
}

// New returns the Translator of one sandbox.
func New(cfg Config) *Translator {
	t := &Translator{
		sandboxID: cfg.SandboxID,
		interval:  cfg.FlushInterval,
		ttl:       cfg.ApprovalTTL,
		now:       cfg.Now,
		newID:     cfg.NewID,
		resolved:  map[string]bool{},
		stats:     Stats{Dropped: map[string]int{}},
	}
	t.toolOutput = cfg.ToolOutput
	roots := newPathRoots(cfg.Dir, cfg.DataDir)
	t.dirs = roots.work()
	t.red = newRedactor(cfg.Secrets, roots)
	if t.interval <= 0 {
		t.interval = DefaultFlushInterval
	}
	if t.ttl <= 0 {
		t.ttl = DefaultApprovalTTL
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.newID == nil {
		t.newID = sandbox.NewID
	}
	t.resetTurn()
	return t
}

func (t *Translator) resetTurn() {
	t.turnID = ""
	t.parts, t.byAgent, t.cur, t.open = nil, map[string]*message{}, nil, nil
	t.tools, t.finished, t.toolOrder = map[string]*tool{}, nil, 0
	t.pending = nil
	t.growing = nil
	t.usage = liveUsage{}
	t.planSent, t.lastPlan = false, nil
}

// InTurn reports whether a turn is running.
func (t *Translator) InTurn() bool { return t.turnID != "" }

// StartTurn starts a turn and returns its turn.started. A turn still running
// is first completed as failed, so every turn keeps its one turn.completed.
func (t *Translator) StartTurn(turnID string, input []sandbox.Input) []*sandbox.Event {
	var evs []*sandbox.Event
	if t.InTurn() {
		evs = t.EndTurn(TurnResult{Err: &sandbox.ErrorInfo{Code: sandbox.ErrInternal, Message: "the turn was superseded by a new turn"}})
	}
	t.resetTurn()
	if turnID == "" {
		turnID = t.newID(sandbox.PrefixTurn)
	}
	now := t.now()
	t.turnID, t.started = turnID, now
	in := make([]sandbox.Input, 0, len(input))
	for _, x := range input {
		x.Text, x.Path = t.redact(x.Text), t.redact(x.Path)
		in = append(in, x)
	}
	return append(evs, t.event(now, sandbox.TypeTurnStarted, &sandbox.TurnStarted{Input: in}))
}

// Update translates the params of one session/update notification.
func (t *Translator) Update(params json.RawMessage) []*sandbox.Event {
	if !t.InTurn() {
		if isConfigUpdate(params) {
			return t.configUpdate(params)
		}
		t.drop(DropOutsideTurn)
		return nil
	}
	var n notification
	if err := json.Unmarshal(params, &n); err != nil || n.Update == nil || n.Update.SessionUpdate == "" {
		t.drop(DropMalformed)
		return nil
	}
	now := t.now()
	switch kind := n.Update.SessionUpdate; kind {
	case "agent_message_chunk":
		return t.chunk(now, sandbox.PartText, n.Update)
	case "agent_thought_chunk":
		return t.chunk(now, sandbox.PartReasoning, n.Update)
	case "tool_call", "tool_call_update":
		return t.toolUpdate(now, n.Update)
	case "plan":
		return t.plan(now, n.Update)
	case "plan_update", "plan_removed":
		// Not ACP's: not forwarded, but it stands between chunks like a
		// tool call.
		t.drop(kind)
		return t.closePart(now, nil)
	case "usage_update":
		return t.usageUpdate(now, n.Update)
	case "current_mode_update", "config_option_update":
		return t.configUpdate(params)
	case "user_message_chunk", "available_commands_update", "session_info_update":
		t.drop(kind)
		return nil
	default:
		t.drop(kind)
		return nil
	}
}

// EndTurn completes the turn: it closes the open part, emits the
// message.completed of the final assistant message, resolves the approvals
// still pending, settles unfinished tools, and emits the turn's one
// turn.completed. Pending approvals are resolved here only in the log: the
// caller answers the agent "cancelled" for each of Pending() beforehand.
// Outside a turn it returns nothing.
func (t *Translator) EndTurn(r TurnResult) []*sandbox.Event {
	if !t.InTurn() {
		return nil
	}
	now := t.now()
	evs := t.closePart(now, nil)
	evs = t.completeMessages(now, evs)

	done := &sandbox.TurnCompleted{DurationMS: now.Sub(t.started).Milliseconds()}
	switch {
	case r.Canceled:
		done.Status, done.StopReason = sandbox.TurnCanceled, sandbox.StopCanceled
	case r.Stopped != nil:
		done.Status, done.StopReason = sandbox.TurnCanceled, sandbox.StopCanceled
		done.Error = &sandbox.ErrorInfo{Code: r.Stopped.Code, Message: t.redactBounded(r.Stopped.Message, maxMessageBytes)}
	case r.Err != nil:
		done.Status, done.StopReason = sandbox.TurnFailed, sandbox.StopError
		done.Error = &sandbox.ErrorInfo{Code: r.Err.Code, Message: t.redactBounded(r.Err.Message, maxMessageBytes)}
		if done.Error.Code == "" {
			done.Error.Code = sandbox.ErrInternal
		}
	case r.StopReason == "cancelled":
		done.Status, done.StopReason = sandbox.TurnCanceled, sandbox.StopCanceled
	case r.StopReason == "":
		done.Status, done.StopReason = sandbox.TurnFailed, sandbox.StopError
		done.Error = &sandbox.ErrorInfo{Code: sandbox.ErrInternal, Message: "the agent ended the turn without a stop reason"}
	case r.StopReason == sandbox.StopEndTurn, r.StopReason == sandbox.StopMaxTokens,
		r.StopReason == sandbox.StopMaxTurnRequests, r.StopReason == sandbox.StopRefusal:
		done.Status, done.StopReason = sandbox.TurnSucceeded, r.StopReason
	default:
		done.Status, done.StopReason = sandbox.TurnSucceeded, sandbox.StopEndTurn
	}
	done.Usage = t.turnUsage(r.Usage)

	done.Changes = t.redactChanges(r.Changes)

	decision, reason := sandbox.DecisionCanceled, sandbox.ReasonTurnCanceled
	if done.Status == sandbox.TurnFailed && r.Err != nil && r.Err.Code == sandbox.ErrAgentExited {
		decision, reason = sandbox.DecisionFailed, sandbox.ReasonAgentExited
	}
	for len(t.pending) > 0 {
		evs = append(evs, t.resolve(now, t.pending[0], decision, "", reason))
	}
	evs = t.settleTools(now, done.Status, evs)
	evs = append(evs, t.event(now, sandbox.TypeTurnCompleted, done))
	t.resetTurn()
	return evs
}

// Error returns a sandbox.error with a redacted message, in the current turn
// if there is one. Codes outside the contract become internal.
func (t *Translator) Error(code, message string) []*sandbox.Event {
	switch code {
	case sandbox.ErrAgentStartFailed, sandbox.ErrAgentExited, sandbox.ErrProtocol,
		sandbox.ErrTurnTimeout, sandbox.ErrCoordinatorRestarted, sandbox.ErrSessionLost, sandbox.ErrInternal,
		sandbox.ErrLogFull, sandbox.ErrDiskFull, sandbox.ErrSourceFailed,
		sandbox.ErrConfigFailed:
	default:
		code = sandbox.ErrInternal
	}
	msg := t.redactBounded(message, maxMessageBytes)
	return []*sandbox.Event{t.event(t.now(), sandbox.TypeSandboxError, &sandbox.SandboxError{Code: code, Message: msg})}
}

// Reverted returns the workspace.reverted of a revert to turn turnID's
// start. It belongs to no turn: a revert runs between turns.
func (t *Translator) Reverted(turnID string) []*sandbox.Event {
	ev := t.event(t.now(), sandbox.TypeWorkspaceReverted, &sandbox.WorkspaceReverted{TurnID: turnID})
	ev.TurnID = ""
	return []*sandbox.Event{ev}
}

// redactChanges copies c with every path redacted: a file an agent names
// after a secret shows no more than its message would.
func (t *Translator) redactChanges(c *sandbox.Changes) *sandbox.Changes {
	if c == nil {
		return nil
	}
	out := *c
	out.Files = make([]sandbox.FileChange, len(c.Files))
	for i, f := range c.Files {
		out.Files[i] = sandbox.FileChange{Path: t.redact(f.Path), Change: f.Change}
	}
	return &out
}

// Stats returns a copy of the counters.
func (t *Translator) Stats() Stats {
	s := t.stats
	s.Dropped = maps.Clone(t.stats.Dropped)
	return s
}

func (t *Translator) event(now time.Time, typ sandbox.Type, data any) *sandbox.Event {
	return &sandbox.Event{Type: typ, TS: now, SandboxID: t.sandboxID, TurnID: t.turnID, Data: data}
}

func (t *Translator) drop(key string) {
	if _, ok := t.stats.Dropped[key]; !ok && (len(t.stats.Dropped) >= maxDropKeys || len(key) > 64) {
		key = DropUnknown
	}
	t.stats.Dropped[key]++
}

// RedactInput returns a turn's input as turn.started shows it. The turn
// resource answered before and while the turn runs must show no more than
// its events do. It counts nothing: StartTurn counts the same text once.
func (t *Translator) RedactInput(input []sandbox.Input) []sandbox.Input {
	out := make([]sandbox.Input, 0, len(input))
	for _, x := range input {
		x.Text, _ = t.red.String(x.Text)
		x.Path, _ = t.red.String(x.Path)
		out = append(out, x)
	}
	return out
}

// redact redacts a whole string that leaves and counts what it replaced.
func (t *Translator) redact(s string) string {
	out, n := t.red.String(s)
	t.stats.Redactions += n
	return out
}

// redactBounded redacts a whole string that leaves and bounds it to about n
// bytes. A cut can turn a longer name into a root ("/srv/database" into
// "/srv/data…"), so a cut string is rewritten again; that can add a few
// bytes, which the bound, there against bloat, allows.
func (t *Translator) redactBounded(s string, n int) string {
	out := t.redact(s)
	if len(out) <= n {
		return out
	}
	out, _ = t.red.String(truncate(out, n))
	return out
}

// Bounds on strings that leave, after redaction, so one oversized field of
// an agent cannot bloat every event that repeats it.
const (
	maxTitleBytes   = 512
	maxLabelBytes   = 200
	maxMessageBytes = 1024
	maxPathBytes    = 4096
	maxLocations    = 100
)

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	n -= len(mark)
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

func isRuneStart(c byte) bool { return c&0xC0 != 0x80 }
