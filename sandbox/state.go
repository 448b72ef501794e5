package sandbox

import (
	"encoding/json"
	"slices"
	"sync/atomic"
)

// State is what a snapshot shows of one sandbox: the resource, the current or
// last turn, the latest snapshot of each message part of that turn, its tool
// states and the pending approvals. A store keeps it next to the log and
// changes it in the same transaction as the events it folds, so a State and
// its Sandbox.LastEventID always agree. Clients keep the same fold.
type State struct {
	Sandbox   Sandbox             `json:"sandbox"`
	Turn      *Turn               `json:"turn"`
	Messages  []MessageUpdated    `json:"messages"`
	Tools     []ToolUpdated       `json:"tools"`
	Approvals []ApprovalRequested `json:"approvals"`
	// Plan is the turn's last plan.updated data (nil before one): each
	// replaces the last.
	Plan *PlanUpdated `json:"plan,omitempty"`

	// AgentSession is the agent's own ACP session id, which the coordinator
	// keeps so that a later boot of the agent can load the conversation
	// (session/load). It is private: Snapshot leaves it out, and no answer
	// or event carries it (docs/agents.md, docs/events.md). The stores keep it with the state
	// because the state is what the coordinator already writes durably, in
	// the same transaction as the status it goes with.
	AgentSession string `json:"agent_session,omitempty"`

	// LogBytes is the size of the retained log: the bytes of its events'
	// envelopes as a reader gets them. TurnBytes is what the log took
	// since the last turn.started, that event included (since the log
	// began, before the first), whatever was removed since. The stores
	// keep both with the watermarks, in the same write, so retention
	// bounds a log and the coordinator a turn in bytes without reading
	// the log. Private like AgentSession: Snapshot leaves them out.
	LogBytes  uint64 `json:"log_bytes,omitempty"`
	TurnBytes uint64 `json:"turn_bytes,omitempty"`

	// ToolsOmitted counts the finished tools of the turn that the fold
	// left out of Tools: a state keeps every tool still pending or running
	// and the most recent finished ones (KeptFinishedTools, up to twice
	// that between two trims), so that what a turn of any length costs to
	// fold, clone, store and serve stays what a screen shows. The JSON
	// events pages have every tool.updated.
	ToolsOmitted int `json:"tools_omitted,omitempty"`

	// idx finds a tool or a message part by id without a walk over the
	// lists. It belongs to one State at a time (owner): a writer's clone
	// takes it over from the state it copies (CloneForFold), anything else
	// builds its own at its first Apply.
	idx *stateIndex
}

// KeptFinishedTools is how many finished tools of a turn a state keeps at
// least: a snapshot lists them (within SnapshotMaxBytes), the rest are
// counted in tools_omitted.
const KeptFinishedTools = 100

// stateIndex maps ids to their place in a State's lists.
type stateIndex struct {
	owner    atomic.Pointer[State]
	tools    map[string]int
	parts    map[string]int
	finished int // finished tools in Tools
}

// index returns the state's own index, building it when the state has
// none: a state decoded from a store, or one whose index a clone took.
func (s *State) index() *stateIndex {
	if s.idx != nil && s.idx.owner.Load() == s {
		return s.idx
	}
	x := &stateIndex{tools: make(map[string]int, len(s.Tools)), parts: make(map[string]int, len(s.Messages))}
	for i, t := range s.Tools {
		x.tools[t.ToolCallID] = i
		if Finished(t.Status) {
			x.finished++
		}
	}
	for i, m := range s.Messages {
		x.parts[m.PartID] = i
	}
	x.owner.Store(s)
	s.idx = x
	return x
}

// CloneForFold is Clone for a writer that will fold events into the copy
// and publish it in place of s: the copy takes over s's index, so that
// folding into it costs nothing per item it holds. s keeps working (a
// later Apply to it builds a new index), which a writer that drops the
// copy after a failed write relies on.
func (s *State) CloneForFold() *State {
	c := s.Clone()
	c.takeIndex(s)
	return c
}

// takeIndex makes s's index c's own, if s owns one: a clone copied the
// lists in the same order, so every place stays right.
func (c *State) takeIndex(s *State) {
	c.idx = nil
	if x := s.idx; x != nil && x.owner.CompareAndSwap(s, c) {
		c.idx = x
	}
}

// ShallowCloneForFold copies what the fold changes in place (the turn and
// the lists) and shares what it only ever replaces (the sandbox's metadata
// and current turn, a tool's locations and output, an approval's options), taking
// over the index like CloneForFold. For a writer whose published states
// never change.
func (s *State) ShallowCloneForFold() *State {
	c := *s
	c.Turn = s.Turn.Clone()
	c.Messages = slices.Clone(s.Messages)
	c.Tools = slices.Clone(s.Tools)
	c.Approvals = slices.Clone(s.Approvals)
	c.takeIndex(s)
	return &c
}

// Finished reports whether a tool status is final.
func Finished(status string) bool {
	return status == ToolCompleted || status == ToolFailed || status == ToolCanceled
}

// Appended counts an event of n bytes appended to the log (see LogBytes).
func (s *State) Appended(typ Type, n int) {
	if typ == TypeTurnStarted {
		s.TurnBytes = 0
	}
	s.LogBytes += uint64(n)
	s.TurnBytes += uint64(n)
}

// Removed counts n bytes of events removed from the log, never below zero.
func (s *State) Removed(n uint64) {
	s.LogBytes -= min(n, s.LogBytes)
}

// Apply folds one durable event into the state. It returns the turn and the
// approval resources the event changed (nil when none) so a store can keep
// them addressable by id.
func (s *State) Apply(ev *Event) (turn *Turn, appr *Approval) {
	if ev.ID != 0 {
		s.Sandbox.LastEventID = Seq(ev.ID)
		if s.Sandbox.OldestEventID == 0 {
			s.Sandbox.OldestEventID = Seq(ev.ID)
		}
	}
	if !ev.TS.IsZero() {
		s.Sandbox.UpdatedAt = ev.TS
	}
	switch d := pointerData(ev.Data).(type) {
	case *TurnStarted:
		t := &Turn{
			ID: ev.TurnID, Object: "turn", SandboxID: ev.SandboxID,
			Status: TurnRunning, Input: d.Input, CreatedAt: ev.TS,
		}
		if c := s.Sandbox.CurrentTurn; c != nil && c.ID == ev.TurnID {
			t.CreatedAt = c.CreatedAt
		}
		if q, ok := s.unqueue(ev.TurnID); ok {
			t.CreatedAt = q.CreatedAt
		}
		s.Turn, s.Messages, s.Tools, s.ToolsOmitted, s.Plan = t, nil, nil, 0, nil
		s.idx = nil
		cur := *t
		s.Sandbox.CurrentTurn = &cur
		return t, nil
	case *TurnQueuedData:
		t := Turn{ID: ev.TurnID, Object: "turn", SandboxID: ev.SandboxID, Status: TurnQueued, Input: d.Input, CreatedAt: ev.TS}
		// A new list, never an append into the old one: a shallow clone
		// shares it (ShallowCloneForFold).
		s.Sandbox.QueuedTurns = append(slices.Clip(s.Sandbox.QueuedTurns), t)
		return t.Clone(), nil
	case *TurnCompleted:
		if q, ok := s.unqueue(ev.TurnID); ok {
			// Ended without running: canceled, or its sandbox went away.
			ts, reason := ev.TS, d.StopReason
			q.Status, q.CompletedAt, q.StopReason = d.Status, &ts, &reason
			return &q, nil
		}
		if s.Turn == nil || s.Turn.ID != ev.TurnID {
			return nil, nil
		}
		ts, reason := ev.TS, d.StopReason
		s.Turn.Status, s.Turn.CompletedAt, s.Turn.StopReason = d.Status, &ts, &reason
		if d.Usage != nil {
			s.Turn.Usage = d.Usage.Clone()
		}
		if c := s.Sandbox.CurrentTurn; c != nil && c.ID == ev.TurnID {
			s.Sandbox.CurrentTurn = nil
		}
		return s.Turn, nil
	case *MessageUpdated:
		s.upsertPart(*d)
	case *MessageCompleted:
		for _, p := range d.Parts {
			s.upsertPart(MessageUpdated{MessageID: d.MessageID, PartID: p.PartID, Index: p.Index, Kind: p.Kind, Text: p.Text})
		}
	case *ToolUpdated:
		s.upsertTool(*d)
	case *ToolOutput:
		s.setOutput(*d)
	case *PlanUpdated:
		s.Plan = d
	case *SandboxUpdated:
		// Replaced, not changed: a shallow clone shares it.
		s.Sandbox.Config = d.Config.Clone()
	case *TurnUsage:
		if s.Turn == nil || s.Turn.ID != ev.TurnID || s.Turn.Done() {
			return nil, nil
		}
		s.Turn.Usage = d.Usage.Clone()
		if c := s.Sandbox.CurrentTurn; c != nil && c.ID == ev.TurnID {
			// Replaced, not changed: a shallow clone shares it.
			cur := *c
			cur.Usage = d.Usage.Clone()
			s.Sandbox.CurrentTurn = &cur
		}
		return s.Turn, nil
	case *ApprovalRequested:
		s.Approvals = append(s.Approvals, *d)
		return nil, &Approval{ID: d.ApprovalID, Object: "approval", SandboxID: ev.SandboxID, TurnID: ev.TurnID, Status: ApprovalPending}
	case *ApprovalResolved:
		for i := range s.Approvals {
			if s.Approvals[i].ApprovalID == d.ApprovalID {
				s.Approvals = append(s.Approvals[:i:i], s.Approvals[i+1:]...)
				break
			}
		}
		decision, option := d.Decision, d.OptionID
		a := &Approval{ID: d.ApprovalID, Object: "approval", SandboxID: ev.SandboxID, TurnID: ev.TurnID, Status: ApprovalDone, Decision: &decision}
		if option != "" {
			a.OptionID = &option
		}
		return nil, a
	}
	return nil, nil
}

// unqueue takes turn id out of the sandbox's queued turns, if it is there,
// into a new list.
func (s *State) unqueue(id string) (Turn, bool) {
	q := s.Sandbox.QueuedTurns
	for i := range q {
		if q[i].ID == id {
			t := *q[i].Clone()
			s.Sandbox.QueuedTurns = append(q[:i:i], q[i+1:]...)
			if len(s.Sandbox.QueuedTurns) == 0 {
				s.Sandbox.QueuedTurns = nil
			}
			return t, true
		}
	}
	return Turn{}, false
}

func (s *State) upsertPart(p MessageUpdated) {
	x := s.index()
	if i, ok := x.parts[p.PartID]; ok {
		s.Messages[i] = p
		return
	}
	x.parts[p.PartID] = len(s.Messages)
	s.Messages = append(s.Messages, p)
}

func (s *State) upsertTool(t ToolUpdated) {
	x := s.index()
	if i, ok := x.tools[t.ToolCallID]; ok {
		if Finished(s.Tools[i].Status) {
			x.finished--
		}
		if t.Output == nil {
			t.Output = s.Tools[i].Output
		}
		s.Tools[i] = t
	} else {
		x.tools[t.ToolCallID] = len(s.Tools)
		s.Tools = append(s.Tools, t)
	}
	if Finished(t.Status) {
		x.finished++
	}
	if x.finished > 2*KeptFinishedTools {
		s.trimTools()
	}
}

// setOutput makes o the output of its tool. The output of a tool the
// state does not hold (left out, or never announced) has nowhere to go:
// the JSON events pages have it.
func (s *State) setOutput(o ToolOutput) {
	if i, ok := s.index().tools[o.ToolCallID]; ok {
		o.ExitCode = ClonePtr(o.ExitCode)
		s.Tools[i].Output = &o
	}
}

// trimTools leaves out the oldest finished tools down to
// KeptFinishedTools. It runs once every KeptFinishedTools finished tools
// at most, so its walk costs each tool a constant share.
func (s *State) trimTools() {
	x := s.index()
	drop := x.finished - KeptFinishedTools
	kept := make([]ToolUpdated, 0, len(s.Tools)-drop)
	for _, t := range s.Tools {
		if drop > 0 && Finished(t.Status) {
			drop--
			s.ToolsOmitted++
			delete(x.tools, t.ToolCallID)
			continue
		}
		x.tools[t.ToolCallID] = len(kept)
		kept = append(kept, t)
	}
	s.Tools = kept
	x.finished = KeptFinishedTools
}

// SnapshotMaxBytes bounds the JSON of a snapshot's data, whatever the turn
// did: a client that connects pays for what a screen shows, not for the
// turn's history.
const SnapshotMaxBytes = 1 << 20

// Snapshot returns the data of a snapshot frame for this state, at most
// SnapshotMaxBytes of JSON. The sandbox, the turn and the pending
// approvals are always in it; then, while they fit, the tools still
// pending or running, the turn's message parts and the finished tools, each
// newest first. What does not fit is counted in tools_omitted and
// messages_omitted, with the finished tools the state itself left out.
// Each list keeps the order of the state.
func (s *State) Snapshot() Snapshot {
	snap := Snapshot{
		Sandbox:       s.Sandbox,
		Turn:          s.Turn,
		Approvals:     s.Approvals,
		Plan:          s.Plan,
		LastEventID:   s.Sandbox.LastEventID,
		OldestEventID: s.Sandbox.OldestEventID,
		PrunedThrough: s.Sandbox.PrunedThrough,
		ToolsOmitted:  s.ToolsOmitted,
	}
	// Lists are [] rather than null so clients can iterate without a check.
	if snap.Approvals == nil {
		snap.Approvals = []ApprovalRequested{}
	}
	head, _ := json.Marshal(snap)
	room := SnapshotMaxBytes - len(head) - 64 // the two lists' numbers may grow
	fits := func(v any) bool {
		b, _ := json.Marshal(v)
		if len(b)+1 > room {
			return false
		}
		room -= len(b) + 1
		return true
	}
	toolIn := make([]bool, len(s.Tools))
	for i := len(s.Tools) - 1; i >= 0; i-- {
		if !Finished(s.Tools[i].Status) {
			toolIn[i] = fits(&s.Tools[i])
		}
	}
	partIn := make([]bool, len(s.Messages))
	for i := len(s.Messages) - 1; i >= 0; i-- {
		partIn[i] = fits(&s.Messages[i])
	}
	for i := len(s.Tools) - 1; i >= 0; i-- {
		if Finished(s.Tools[i].Status) {
			toolIn[i] = fits(&s.Tools[i])
		}
	}
	snap.Tools = make([]ToolUpdated, 0, len(s.Tools))
	for i, in := range toolIn {
		if in {
			snap.Tools = append(snap.Tools, s.Tools[i])
		} else {
			snap.ToolsOmitted++
		}
	}
	snap.Messages = make([]MessageUpdated, 0, len(s.Messages))
	for i, in := range partIn {
		if in {
			snap.Messages = append(snap.Messages, s.Messages[i])
		} else {
			snap.MessagesOmitted++
		}
	}
	return snap
}

// Marks returns the watermarks of the state's log.
func (s *State) Marks() Marks {
	return Marks{OldestEventID: s.Sandbox.OldestEventID, PrunedThrough: s.Sandbox.PrunedThrough, LastEventID: s.Sandbox.LastEventID}
}

// pointerData returns payloads given as values as pointers, so the fold
// treats Event.Data the same whichever way it was built.
func pointerData(d any) any {
	switch v := d.(type) {
	case TurnStarted:
		return &v
	case TurnQueuedData:
		return &v
	case TurnCompleted:
		return &v
	case MessageUpdated:
		return &v
	case MessageCompleted:
		return &v
	case ToolUpdated:
		return &v
	case ApprovalRequested:
		return &v
	case ApprovalResolved:
		return &v
	case PlanUpdated:
		return &v
	case ToolOutput:
		return &v
	case TurnUsage:
		return &v
	case SandboxUpdated:
		return &v
	}
	return d
}
