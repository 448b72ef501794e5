package boltstore

import (
	"github.com/sparkles-dev/sparkles/sandbox"
)

// foldClone copies a published state for the committer to fold events into
// and to move watermarks of. What the fold changes in place (the turn, the
// lists of parts, tools and approvals) is copied; what it only ever replaces
// (the sandbox's metadata and current turn, a tool's locations, an
// approval's options) is shared, since a published state never changes.
// A mutate, which may change anything, gets a State.Clone instead.
func foldClone(s *sandbox.State) *sandbox.State {
	// The whole struct is copied there, so a field the fold never touches
	// (the agent's session) survives every append, not only those with a
	// mutate; the copy takes over the state's index of tools and parts.
	return s.ShallowCloneForFold()
}
