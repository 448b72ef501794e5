package boltstore

import (
	"slices"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// foldClone copies a published state for the committer to fold events into
// and to move watermarks of. What the fold changes in place (the turn, the
// lists of parts, tools and approvals) is copied; what it only ever replaces
// (the sandbox's metadata and current turn, a tool's locations, an
// approval's options) is shared, since a published state never changes.
// A mutate, which may change anything, gets a State.Clone instead.
func foldClone(s *sandbox.State) *sandbox.State {
	// The whole struct first: a field the fold never touches (the agent's
	// session) must survive every append, not only those with a mutate.
	c := *s
	c.Turn = s.Turn.Clone()
	c.Messages = slices.Clone(s.Messages)
	c.Tools = slices.Clone(s.Tools)
	c.Approvals = slices.Clone(s.Approvals)
	return &c
}
