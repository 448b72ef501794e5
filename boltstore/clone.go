package boltstore

import (
	"maps"
	"slices"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The published state of a sandbox is shared by every reader and is never
// changed in place: writers change a clone and publish it, readers get a
// clone. These copy every slice, map and pointer a caller could write through.

func cloneState(s *sandbox.State) *sandbox.State {
	c := &sandbox.State{
		Sandbox:   cloneSandbox(s.Sandbox),
		Turn:      cloneTurn(s.Turn),
		Messages:  slices.Clone(s.Messages),
		Tools:     slices.Clone(s.Tools),
		Approvals: slices.Clone(s.Approvals),
	}
	for i := range c.Tools {
		c.Tools[i].Locations = cloneLocations(c.Tools[i].Locations)
	}
	for i := range c.Approvals {
		c.Approvals[i].Options = slices.Clone(c.Approvals[i].Options)
	}
	return c
}

func cloneSandbox(sb sandbox.Sandbox) sandbox.Sandbox {
	sb.Metadata = maps.Clone(sb.Metadata)
	sb.CurrentTurn = cloneTurn(sb.CurrentTurn)
	return sb
}

func cloneTurn(t *sandbox.Turn) *sandbox.Turn {
	if t == nil {
		return nil
	}
	c := *t
	c.Input = slices.Clone(t.Input)
	c.CompletedAt = clonePtr(t.CompletedAt)
	c.StopReason = clonePtr(t.StopReason)
	return &c
}

func cloneLocations(locs []sandbox.Location) []sandbox.Location {
	locs = slices.Clone(locs)
	for i := range locs {
		locs[i].Line = clonePtr(locs[i].Line)
	}
	return locs
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// foldClone copies a published state for the committer to fold events into
// and to move watermarks of. What the fold changes in place (the turn, the
// lists of parts, tools and approvals) is copied; what it only ever replaces
// (the sandbox's metadata and current turn, a tool's locations, an
// approval's options) is shared, since a published state never changes.
// A mutate, which may change anything, gets a cloneState instead.
func foldClone(s *sandbox.State) *sandbox.State {
	return &sandbox.State{
		Sandbox:   s.Sandbox,
		Turn:      cloneTurn(s.Turn),
		Messages:  slices.Clone(s.Messages),
		Tools:     slices.Clone(s.Tools),
		Approvals: slices.Clone(s.Approvals),
	}
}
