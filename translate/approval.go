package translate

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// approval is a permission request waiting for a decision.
type approval struct {
	id      string
	options []option
	expires time.Time
	tool    *tool // the tool call the request is about
}

// option is one choice of an approval: our id, the agent's, and its kind.
type option struct {
	id, agentID, kind string
}

func (a *approval) public() Pending {
	opts := make(map[string]string, len(a.options))
	for _, o := range a.options {
		opts[o.id] = o.agentID
	}
	return Pending{ApprovalID: a.id, AgentOptions: opts, ExpiresAt: a.expires}
}

// RequestPermission turns the params of session/request_permission into
// approval.requested, preceded by a tool.updated when the request announces
// or changes its tool call (upserted like tool_call_update). A Pending with
// an empty ApprovalID means no approval was opened (outside a turn,
// malformed params, no option we understand): answer the agent "cancelled".
func (t *Translator) RequestPermission(params json.RawMessage) (Pending, []*sandbox.Event) {
	if !t.InTurn() {
		t.drop(DropOutsideTurn)
		return Pending{}, nil
	}
	var req permissionParams
	if err := json.Unmarshal(params, &req); err != nil || req.ToolCall == nil {
		t.drop(DropMalformed)
		return Pending{}, nil
	}
	f, err := decodeToolFields(req.ToolCall)
	if err != nil {
		t.drop(DropMalformed)
		return Pending{}, nil
	}
	now := t.now()
	// The request stands between chunks like a tool call does.
	evs := t.closePart(now, nil)
	tl, evs := t.upsertTool(now, f, evs)
	if tl.state.Status == sandbox.ToolRunning {
		// Some agents (Codex) announce a tool as in progress and then ask
		// whether it may run: until a decision it waits, and says so.
		tl.state.Status = sandbox.ToolPending
		evs = append(evs, t.toolEvent(now, tl))
	}

	a := &approval{id: t.newID(sandbox.PrefixApproval), expires: now.Add(t.ttl), tool: tl}
	data := &sandbox.ApprovalRequested{
		ApprovalID: a.id,
		ToolCallID: tl.state.ToolCallID,
		Title:      tl.state.Title,
		Kind:       tl.state.Kind,
		Options:    []sandbox.Option{},
		ExpiresAt:  a.expires,
	}
	for _, o := range req.Options {
		kind, ok := optionKind(o.Kind)
		if !ok || o.OptionID == "" {
			t.drop(DropUnknownOption)
			continue
		}
		id := "opt_" + strconv.Itoa(len(a.options)+1)
		a.options = append(a.options, option{id: id, agentID: o.OptionID, kind: kind})
		data.Options = append(data.Options, sandbox.Option{OptionID: id, Kind: kind, Label: t.redactBounded(o.Name, maxLabelBytes)})
	}
	if len(a.options) == 0 {
		t.drop(DropNoOptions)
		return Pending{}, evs
	}
	t.pending = append(t.pending, a)
	return a.public(), append(evs, t.event(now, sandbox.TypeApprovalRequested, data))
}

func optionKind(k string) (string, bool) {
	switch k {
	case sandbox.OptionAllowOnce, sandbox.OptionAllowAlways, sandbox.OptionRejectOnce, sandbox.OptionRejectAlways:
		return k, true
	}
	return "", false
}

// ResolveApproval resolves a pending approval and returns what to answer the
// agent and the approval.resolved event.
//
// decision is approved, denied, canceled or failed. optionID is one of our
// option ids or "": approved picks the allow_once option (allow_always only
// when there is none), denied reject_once (else reject_always). With an optionID, decision may be "" and is then taken
// from the option's kind. reason is user when "". Canceled and failed answer
// the agent "cancelled". The error is a *sandbox.Error: not_found for an
// unknown approval, approval_resolved for one already resolved,
// invalid_request for a decision, option or reason that does not fit.
func (t *Translator) ResolveApproval(approvalID, decision, optionID, reason string) (AgentOutcome, []*sandbox.Event, error) {
	var a *approval
	for _, p := range t.pending {
		if p.id == approvalID {
			a = p
			break
		}
	}
	if a == nil {
		if t.resolved[approvalID] {
			return AgentOutcome{}, nil, sandbox.Errorf(sandbox.EApprovalResolved, "approval %s is already resolved", approvalID)
		}
		return AgentOutcome{}, nil, sandbox.Errorf(sandbox.ENotFound, "approval %s not found", approvalID)
	}
	switch reason {
	case "":
		reason = sandbox.ReasonUser
	case sandbox.ReasonUser, sandbox.ReasonTimeout, sandbox.ReasonTurnCanceled, sandbox.ReasonAgentExited:
	default:
		return AgentOutcome{}, nil, sandbox.Errorf(sandbox.EInvalidRequest, "unknown reason %q", reason)
	}
	var out AgentOutcome
	switch decision {
	case sandbox.DecisionCanceled, sandbox.DecisionFailed:
		out.Cancelled, optionID = true, ""
	case sandbox.DecisionApproved, sandbox.DecisionDenied, "":
		o, err := pickOption(a, decision, optionID)
		if err != nil {
			return AgentOutcome{}, nil, err
		}
		if decision == "" {
			decision = sandbox.DecisionDenied
			if strings.HasPrefix(o.kind, "allow_") {
				decision = sandbox.DecisionApproved
			}
		}
		out.OptionID, optionID = o.agentID, o.id
	default:
		return AgentOutcome{}, nil, sandbox.Errorf(sandbox.EInvalidRequest, "unknown decision %q", decision)
	}
	now := t.now()
	evs := []*sandbox.Event{t.resolve(now, a, decision, optionID, reason)}
	if decision == sandbox.DecisionApproved && a.tool.state.Status == sandbox.ToolPending {
		// Allowed, the tool runs: agents that go straight from asking to
		// done (Codex again) would otherwise never show it running.
		a.tool.state.Status = sandbox.ToolRunning
		evs = append(evs, t.toolEvent(now, a.tool))
	}
	return out, evs, nil
}

// pickOption finds the option a decision selects. A plain decision never
// picks an always-option while a once-option is offered: approve answers the
// agent's allow_once (allow_always only when it offers no allow_once), deny
// its reject_once (else reject_always). Agents list their options in any
// order, Claude Code and Gemini CLI with allow_always first, so the order
// says nothing about what one approval should grant. Only an explicit
// option id chooses an always-option.
func pickOption(a *approval, decision, optionID string) (option, error) {
	var prefer []string
	switch decision {
	case sandbox.DecisionApproved:
		prefer = []string{sandbox.OptionAllowOnce, sandbox.OptionAllowAlways}
	case sandbox.DecisionDenied:
		prefer = []string{sandbox.OptionRejectOnce, sandbox.OptionRejectAlways}
	}
	if optionID == "" {
		if prefer == nil {
			return option{}, sandbox.Errorf(sandbox.EInvalidRequest, "a decision or an option is required")
		}
		for _, kind := range prefer {
			for _, o := range a.options {
				if o.kind == kind {
					return o, nil
				}
			}
		}
		verb := "allow"
		if decision == sandbox.DecisionDenied {
			verb = "reject"
		}
		return option{}, sandbox.Errorf(sandbox.EInvalidRequest, "approval %s offers no option to %s", a.id, verb)
	}
	for _, o := range a.options {
		if o.id == optionID {
			if prefer != nil && o.kind != prefer[0] && o.kind != prefer[1] {
				return option{}, sandbox.Errorf(sandbox.EInvalidRequest, "option %s is %s, not a way to decide %s", optionID, o.kind, decision)
			}
			return o, nil
		}
	}
	return option{}, sandbox.Errorf(sandbox.EInvalidRequest, "approval %s has no option %s", a.id, optionID)
}

// resolve removes a from the pending list and returns its approval.resolved.
func (t *Translator) resolve(now time.Time, a *approval, decision, optionID, reason string) *sandbox.Event {
	for i, p := range t.pending {
		if p == a {
			t.pending = append(t.pending[:i:i], t.pending[i+1:]...)
			break
		}
	}
	t.resolved[a.id] = true
	return t.event(now, sandbox.TypeApprovalResolved, &sandbox.ApprovalResolved{
		ApprovalID: a.id, Decision: decision, OptionID: optionID, Reason: reason,
	})
}

// Pending returns the approvals not yet resolved, oldest first.
func (t *Translator) Pending() []Pending {
	out := make([]Pending, 0, len(t.pending))
	for _, a := range t.pending {
		out = append(out, a.public())
	}
	return out
}
