package sandbox

import (
	"maps"
	"slices"
)

// Stores share a published state with every reader and never change it in
// place: writers change a clone and publish it, readers get a clone. These
// copy every slice, map and pointer a caller could write through.

// Clone returns a deep copy of the state.
func (s *State) Clone() *State {
	// A copy of the whole struct first, so that a field added later is
	// carried even where nobody thought of it here.
	c := new(State)
	*c = *s
	c.Sandbox = s.Sandbox.Clone()
	c.Turn = s.Turn.Clone()
	c.Messages = slices.Clone(s.Messages)
	c.Tools = slices.Clone(s.Tools)
	c.Approvals = slices.Clone(s.Approvals)
	for i := range c.Tools {
		c.Tools[i].Locations = CloneLocations(c.Tools[i].Locations)
		c.Tools[i].Output = c.Tools[i].Output.Clone()
	}
	for i := range c.Approvals {
		c.Approvals[i].Options = slices.Clone(c.Approvals[i].Options)
	}
	if s.Plan != nil {
		c.Plan = &PlanUpdated{Entries: slices.Clone(s.Plan.Entries)}
	}
	return c
}

// Clone returns a deep copy of the sandbox resource.
func (sb Sandbox) Clone() Sandbox {
	sb.Metadata = maps.Clone(sb.Metadata)
	sb.CurrentTurn = sb.CurrentTurn.Clone()
	if sb.QueuedTurns != nil {
		q := make([]Turn, len(sb.QueuedTurns))
		for i := range q {
			q[i] = *sb.QueuedTurns[i].Clone()
		}
		sb.QueuedTurns = q
	}
	sb.Source = sb.Source.Clone()
	sb.MCPServers = CloneMCPServers(sb.MCPServers)
	sb.Config = sb.Config.Clone()
	return sb
}

// Clone returns a deep copy of the source; nil stays nil.
func (s *Source) Clone() *Source {
	if s == nil {
		return nil
	}
	c := *s
	if s.Git != nil {
		g := *s.Git
		c.Git = &g
	}
	return &c
}

// Clone returns a deep copy of the turn; nil stays nil.
func (t *Turn) Clone() *Turn {
	if t == nil {
		return nil
	}
	c := *t
	c.Input = slices.Clone(t.Input)
	c.CompletedAt = ClonePtr(t.CompletedAt)
	c.StopReason = ClonePtr(t.StopReason)
	c.Usage = t.Usage.Clone()
	return &c
}

// Clone returns a deep copy of the output; nil stays nil.
func (o *ToolOutput) Clone() *ToolOutput {
	if o == nil {
		return nil
	}
	c := *o
	c.ExitCode = ClonePtr(o.ExitCode)
	return &c
}

// CloneLocations copies a tool's locations, line numbers included.
func CloneLocations(locs []Location) []Location {
	locs = slices.Clone(locs)
	for i := range locs {
		locs[i].Line = ClonePtr(locs[i].Line)
	}
	return locs
}

// ClonePtr returns a pointer to a copy of *p, or nil for nil.
func ClonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
