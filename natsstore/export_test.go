package natsstore

// KillConnection closes the store's NATS connection at once, as when its
// process dies: nothing more is written through it, no lease is let go,
// and a cluster on it stops answering and renewing.
func KillConnection(s *Store) { s.nc.Close() }
