package sandbox

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

	// AgentSession is the agent's own ACP session id, which the coordinator
	// keeps so that a later boot of the agent can load the conversation
	// (session/load). It is private: Snapshot leaves it out, and no answer
	// or event carries it (SPEC §2, §4). The stores keep it with the state
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
		s.Turn, s.Messages, s.Tools = t, nil, nil
		cur := *t
		s.Sandbox.CurrentTurn = &cur
		return t, nil
	case *TurnCompleted:
		if s.Turn == nil || s.Turn.ID != ev.TurnID {
			return nil, nil
		}
		ts, reason := ev.TS, d.StopReason
		s.Turn.Status, s.Turn.CompletedAt, s.Turn.StopReason = d.Status, &ts, &reason
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
		for i := range s.Tools {
			if s.Tools[i].ToolCallID == d.ToolCallID {
				s.Tools[i] = *d
				return nil, nil
			}
		}
		s.Tools = append(s.Tools, *d)
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

func (s *State) upsertPart(p MessageUpdated) {
	for i := range s.Messages {
		if s.Messages[i].PartID == p.PartID {
			s.Messages[i] = p
			return
		}
	}
	s.Messages = append(s.Messages, p)
}

// Snapshot returns the data of a snapshot frame for this state.
func (s *State) Snapshot() Snapshot {
	snap := Snapshot{
		Sandbox:       s.Sandbox,
		Turn:          s.Turn,
		Messages:      s.Messages,
		Tools:         s.Tools,
		Approvals:     s.Approvals,
		LastEventID:   s.Sandbox.LastEventID,
		OldestEventID: s.Sandbox.OldestEventID,
		PrunedThrough: s.Sandbox.PrunedThrough,
	}
	// Lists are [] rather than null so clients can iterate without a check.
	if snap.Messages == nil {
		snap.Messages = []MessageUpdated{}
	}
	if snap.Tools == nil {
		snap.Tools = []ToolUpdated{}
	}
	if snap.Approvals == nil {
		snap.Approvals = []ApprovalRequested{}
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
	}
	return d
}
