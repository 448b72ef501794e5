package natsstore

// KillConnection closes the store's NATS connection at once, as when its
// process dies: nothing more is written through it, no lease is let go,
// and a cluster on it stops answering and renewing.
func KillConnection(s *Store) { s.nc.Close() }

// SetHooks makes s call afterSend after event i of an append went out
// (before the next), and beforeCommit once an append's events are stored
// (before its state is). Either may be nil.
func SetHooks(s *Store, afterSend func(id string, i int), beforeCommit func(id string)) {
	s.hooks = &testHooks{afterSend: afterSend, beforeCommit: beforeCommit}
}
