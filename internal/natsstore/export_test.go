package natsstore

// SetHooks makes s call afterSend after event i of an append went out
// (before the next), and beforeCommit once an append's events are stored
// (before its state is). Either may be nil.
func SetHooks(s *Store, afterSend func(id string, i int), beforeCommit func(id string)) {
	s.hooks = &testHooks{afterSend: afterSend, beforeCommit: beforeCommit}
}

// SetPublishHook makes s run each attempt to publish an append's events
// through fn, which may make it (do) or not, and returns what the writer
// is told of it.
func SetPublishHook(s *Store, fn func(do func() ([]uint64, error)) ([]uint64, error)) {
	if s.hooks == nil {
		s.hooks = &testHooks{}
	}
	s.hooks.publish = fn
}
