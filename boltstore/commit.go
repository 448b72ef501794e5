package boltstore

import (
	"errors"
	"time"

	"go.etcd.io/bbolt"
)

// commitLoop runs the queued writes in batches (see doc.go, Writes):
// whatever is queued when the committer is free, up to MaxBatch requests,
// is one batch, applied in queue order in one transaction and synced once.
// It does not wait to gather more: what arrives while a batch commits makes
// the next one. After each batch, a WAL over its limits is materialized
// until it is back under them. Once the queue is closed what is left is
// materialized, so a clean shutdown leaves an empty WAL.
func (s *Store) commitLoop() {
	for r := range s.reqs {
		batch := s.drain([]*request{r})
		s.flushFor(batch)
		s.commit(batch)
		s.relieve()
	}
	// A file found damaged is not written to again; one kept as a crash
	// leaves it is left so.
	if s.holdWAL() {
		return
	}
	if err := s.materializeAll(); err != nil {
		s.log.Error("event store: materializing the WAL at close failed; it is replayed at the next open", "err", err)
	}
	if err := s.syncFreelist(); err != nil {
		s.log.Error("event store: writing the free-page list at close failed; the next open rebuilds it from every page", "err", err)
	}
}

// drain adds what is queued to reqs without waiting, up to the batch limit.
func (s *Store) drain(reqs []*request) []*request {
	for len(reqs) < s.maxBatch {
		select {
		case r, ok := <-s.reqs:
			if !ok {
				return reqs
			}
			reqs = append(reqs, r)
		default:
			return reqs
		}
	}
	return reqs
}

// flushFor materializes the whole WAL before a batch that asks for it.
func (s *Store) flushFor(batch []*request) {
	var err error
	done := false
	for _, r := range batch {
		if w, ok := r.w.(*flushWrite); ok {
			if !done {
				err, done = s.materializeAll(), true
			}
			w.err = err
		}
	}
}

// relieve materializes the WAL a chunk at a time while it holds more than
// its limits. The appends queued meanwhile wait (backpressure).
func (s *Store) relieve() {
	if s.holdWAL() {
		return
	}
	for s.walOver() {
		if err := s.materializeChunk(); err != nil {
			s.log.Error("event store: materializing the WAL failed", "err", err)
			return
		}
	}
}

// holdWAL tells the committer to leave the WAL as it is, but where a
// write needs it: in tests that keep it as a crash would, and on a file
// found damaged, which is not written again for the WAL's sake.
func (s *Store) holdWAL() bool { return s.test.keepingWAL() || s.damaged.Load() }

func (s *Store) walOver() bool {
	l := s.limits
	return s.walRecs > l.maxRecords || s.walBytes > l.maxBytes || s.walLen > l.maxRecords
}

// errNothingToCommit rolls back a transaction in which every request failed
// on its own, which saves the fsync.
var errNothingToCommit = errors.New("nothing to commit")

// commit runs a batch of callers' writes as one transaction.
func (s *Store) commit(batch []*request) {
	errs := make([]error, len(batch))
	err := s.update(func(t *txn) error { return applyAll(t, batch, errs) }, true)
	if err != nil {
		s.log.Error("event store commit failed", "requests", len(batch), "err", err)
		for i := range errs {
			errs[i] = err
		}
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}

// applyAll applies the requests in order, each one's own error in errs; a
// transaction error stops it.
func applyAll(t *txn, reqs []*request, errs []error) error {
	for i, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		// Queued before the file went from its path.
		if err := t.s.refused(r.w); err != nil {
			errs[i] = err
			continue
		}
		reqErr, txErr := r.w.apply(t)
		if txErr != nil {
			return txErr
		}
		errs[i] = reqErr
	}
	return nil
}

// update runs fn in one transaction, writes what it changed and publishes
// it once the commit is synced. callers marks a batch of callers' writes
// (not a materialization): only those are observed and seen by the
// afterCommit and failCommit hooks.
func (s *Store) update(fn func(t *txn) error, callers bool) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()

	t := &txn{s: s, pending: make(map[string]*pending)}
	start := time.Now()
	s.syncFreelistFor()
	err := s.updateDB(func(tx *bbolt.Tx) error {
		if err := t.begin(tx); err != nil {
			return err
		}
		if err := fn(t); err != nil {
			return err
		}
		if !t.dirty {
			return errNothingToCommit
		}
		if err := t.flush(); err != nil {
			return err
		}
		if callers {
			return s.test.failure()
		}
		return nil
	})
	switch {
	case errors.Is(err, errNothingToCommit):
		if t.walEmptied {
			s.mu.Lock()
			s.walLen = 0 // the count was off; an empty WAL needs no truncation
			s.mu.Unlock()
		}
		return nil
	case err != nil:
		s.forget(t)
		return s.failedCommit(err)
	}
	if callers {
		s.test.committed(t)
	}
	s.publish(t)
	if callers {
		s.observe(t, time.Since(start))
	}
	return nil
}

// observe tells the observer about a commit of callers' writes that made
// events durable.
func (s *Store) observe(t *txn, took time.Duration) {
	if s.observer == nil {
		return
	}
	n := 0
	for _, p := range t.order {
		n += len(p.recs)
	}
	if n > 0 {
		s.observer.Commit(n, took, t.wrote)
	}
}

// publish makes a committed transaction visible: resources, states, WAL
// tails and watermarks change together under one lock, then, once it is
// let go, waiters wake.
// It also moves the WAL's bookkeeping: a sandbox written through the WAL
// grows its tail, one whose buckets were brought up to date loses it.
func (s *Store) publish(t *txn) {
	s.mu.Lock()
	woken := make([]chan struct{}, 0, len(t.order))
	wake := func(e *entry) {
		if c := e.take(); c != nil {
			woken = append(woken, c)
		}
	}
	defer func() {
		s.mu.Unlock()
		for _, c := range woken {
			close(c)
		}
	}()
	s.walLen += t.walPut - t.walDeleted
	if t.walEmptied {
		s.walLen = t.walPut
	}
	for _, p := range t.order {
		e := s.sandboxes[p.id]
		if p.dropped {
			if e != nil {
				s.dropTail(e, p.id)
				wake(e)
				delete(s.sandboxes, p.id)
			}
			continue
		}
		if p.created || e == nil {
			if e != nil {
				s.dropTail(e, p.id)
				wake(e)
			}
			e = &entry{}
			s.sandboxes[p.id] = e
		}
		if p.direct {
			s.dropTail(e, p.id)
		} else if len(p.walKeys) > 0 {
			s.growTail(e, p)
		}
		if !p.changed {
			continue
		}
		e.sb, e.state = p.state.Sandbox, p.state
		wake(e)
	}
}

// forget drops the cached states a failed transaction touched. Nothing of it
// was published, but reloading from the file keeps the cache provably equal
// to what is on disk. A sandbox with a WAL tail keeps its state: the file
// does not have all of it, memory does.
func (s *Store) forget(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range t.order {
		if e := s.sandboxes[p.id]; e != nil && e.wal == nil {
			e.state = nil
		}
	}
}
