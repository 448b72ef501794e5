package boltstore

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// commitLoop runs the writes of the queue in batches, one transaction and
// one sync each. There is no delay to gather a batch: whatever arrived while
// the previous commit was syncing makes the next one.
//
// Batches of appends alone are pipelined: while the transaction of one (its
// flight) writes and syncs in another goroutine, the next is prepared in
// memory as its requests arrive (ids, fold, encoding, WAL entries), on top
// of the states the flight will publish; its transaction then only puts the
// prepared WAL entries. Publication keeps to commit order, after each sync.
// Any other write is a barrier: the pipeline drains and the batch that
// starts with it applies inside its own transaction.
//
// Retention's writes (prunes and compactions) ride instead: they wait for
// the next batch of appends and apply in its transaction, so deleting
// history costs appends some page writes, never a transaction and a sync of
// their own to queue behind. A rider that finds no batch within rideWait
// (or when the store closes) commits alone.
//
// Between batches the WAL is materialized when it has grown past its
// limits, or when it is old and nothing else waits; once the queue is
// closed what is left is materialized, so a clean shutdown leaves an empty
// WAL.
func (s *Store) commitLoop() {
	var fl *flight
	var barrier *request  // waits for the pipeline to drain
	var riders []*request // wait for a batch of appends to ride with
	closed := false
	for {
		if fl == nil {
			if barrier != nil {
				s.commitSync(append(s.drain([]*request{barrier}), riders...))
				barrier, riders = nil, nil
				continue
			}
			var r *request
			ok := false
			if len(riders) > 0 {
				if !closed {
					r, ok = s.nextWithin(s.limits.ride)
				}
				if !ok {
					s.commitSync(riders) // nothing to ride with
					riders = nil
					continue
				}
			} else {
				if closed {
					break
				}
				if r, ok = s.next(); !ok {
					break
				}
			}
			reqs := s.drain([]*request{r})
			switch {
			case allRiders(reqs):
				riders = append(riders, reqs...)
				continue
			case len(riders) > 0 || !allAppends(reqs):
				s.commitSync(append(reqs, riders...))
				riders = nil
				continue
			}
			b := s.newBatch(nil)
			for _, r := range reqs {
				b.add(r)
			}
			s.carry(b)
			fl = s.launch(b)
			continue
		}

		// Prepare the next batch while the flight is in the air.
		b := s.newBatch(fl.b.t)
		var err error
		open := func() bool {
			return barrier == nil && len(riders) == 0 && !closed && len(b.reqs) < s.maxBatch
		}
		take := func(r *request, ok bool) {
			switch {
			case !ok:
				closed = true
			case isAppend(r):
				b.add(r)
			case isRider(r):
				riders = append(riders, r)
			default:
				barrier = r
			}
		}
		for landed := false; !landed; {
			var reqs <-chan *request
			if open() {
				reqs = s.reqs
			}
			select {
			case err = <-fl.done:
				landed = true
			case r, ok := <-reqs:
				take(r, ok)
			}
		}
		s.land(fl, err)
		if err != nil {
			b.fail(fmt.Errorf("commit to event store: an earlier batch failed: %w", err))
		}
		b.t.base = nil
		// Take what is queued.
	drain:
		for open() {
			select {
			case r, ok := <-s.reqs:
				take(r, ok)
			default:
				break drain
			}
		}
		if len(riders) > 0 && len(b.reqs) > 0 && barrier == nil {
			s.ride(b, riders)
			riders, fl = nil, nil
			s.relieve()
			continue
		}
		s.carry(b)
		fl = s.launch(b)
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

// rideWait is how long a prune or a compaction waits for a batch of appends
// to ride with before it commits alone. Appends that come further apart
// than this rarely meet a retention transaction anyway.
const rideWait = 10 * time.Millisecond

// nextWithin waits up to d for the next request.
func (s *Store) nextWithin(d time.Duration) (*request, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r, ok := <-s.reqs:
		return r, ok
	case <-timer.C:
		return nil, false
	}
}

// ride commits a prepared batch of appends and the riders in one
// transaction, the appends first, as commit would apply them. A rider's
// error of its own fails it alone.
func (s *Store) ride(b *batch, riders []*request) {
	errs := make([]error, len(riders))
	err := s.updateTxn(b.t, func(t *txn) error {
		return applyAll(t, riders, errs)
	}, true)
	if err != nil {
		s.log.Error("event store commit failed", "requests", len(b.reqs)+len(riders), "err", err)
		b.fail(err)
		for i := range errs {
			errs[i] = err
		}
	}
	b.answer()
	for i, r := range riders {
		r.done <- errs[i]
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

func isAppend(r *request) bool {
	_, ok := r.w.(*appendWrite)
	return ok
}

// isRider reports whether r is a retention write, which rides with the
// next batch of appends (see commitLoop).
func isRider(r *request) bool {
	switch r.w.(type) {
	case *pruneWrite, *compactWrite:
		return true
	}
	return false
}

func allRiders(reqs []*request) bool {
	for _, r := range reqs {
		if !isRider(r) {
			return false
		}
	}
	return true
}

func allAppends(reqs []*request) bool {
	for _, r := range reqs {
		if !isAppend(r) {
			return false
		}
	}
	return true
}

// batch is a batch of appends prepared outside any transaction.
type batch struct {
	t     *txn
	reqs  []*request
	errs  []error
	chunk *chunk // WAL to materialize in the batch's transaction, if any
}

// newBatch starts a batch on top of the states base (the flight's
// transaction) will publish, or of the published ones.
func (s *Store) newBatch(base *txn) *batch {
	return &batch{t: &txn{s: s, pending: make(map[string]*pending), base: base}}
}

// add prepares an append. An error of its own fails it alone, as in a
// transaction; it is answered with the batch.
func (b *batch) add(r *request) {
	err := r.ctx.Err()
	if err == nil {
		err = b.t.s.refused(r.w)
	}
	if err == nil {
		var txErr error
		if err, txErr = r.w.apply(b.t); txErr != nil {
			err = txErr
		}
	}
	b.reqs = append(b.reqs, r)
	b.errs = append(b.errs, err)
}

// fail fails every request of the batch: what it prepared rests on states
// that will not be published.
func (b *batch) fail(err error) {
	for i := range b.errs {
		b.errs[i] = err
	}
	b.t = &txn{s: b.t.s, pending: make(map[string]*pending)}
}

func (b *batch) answer() {
	for i, r := range b.reqs {
		r.done <- b.errs[i]
	}
}

// flight is a prepared batch whose transaction is running.
type flight struct {
	b     *batch
	done  chan error
	start time.Time
}

// launch starts the transaction of a prepared batch, holding commitMu until
// land has published it. A batch with nothing to write is answered at once.
func (s *Store) launch(b *batch) *flight {
	if len(b.reqs) == 0 {
		return nil
	}
	if !b.t.dirty && b.chunk == nil {
		b.answer()
		return nil
	}
	s.commitMu.Lock()
	fl := &flight{b: b, done: make(chan error, 1), start: time.Now()}
	go func() {
		fl.done <- s.updateDB(func(tx *bbolt.Tx) error {
			if err := b.t.begin(tx); err != nil {
				return err
			}
			if err := b.chunk.materialize(b.t); err != nil {
				return err
			}
			if err := b.t.flush(); err != nil {
				return err
			}
			return s.test.failure()
		})
	}()
	return fl
}

// land publishes a flight that committed, or fails its requests, and
// answers them.
func (s *Store) land(fl *flight, err error) {
	b := fl.b
	if err != nil {
		s.log.Error("event store commit failed", "requests", len(b.reqs), "err", err)
		s.forget(b.t)
		b.fail(s.failedCommit(err))
	} else {
		s.test.committed(b.t)
		s.publish(b.t)
		s.observe(b.t, time.Since(fl.start))
	}
	s.commitMu.Unlock()
	b.answer()
	if b.chunk != nil && err == nil {
		s.test.materialized()
	}
}

// commitSync runs a batch that holds writes other than appends: flushes
// first, then one transaction in which every request applies in order.
func (s *Store) commitSync(reqs []*request) {
	s.flushFor(reqs)
	s.commit(reqs)
	s.relieve()
}

// next waits for the next request. When the WAL has held entries for the
// idle delay and no request waits, it materializes them a chunk at a time
// until the WAL is empty or a request comes. A pass cut short by requests
// restarts the delay, so a busy committer materializes at most a chunk per
// delay this way (relieve bounds the WAL under load).
func (s *Store) next() (*request, bool) {
	for {
		select {
		case r, ok := <-s.reqs:
			return r, ok
		default:
		}
		if s.walLen == 0 || s.holdWAL() {
			r, ok := <-s.reqs
			return r, ok
		}
		if wait := time.Until(s.walSince.Add(s.limits.idle)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case r, ok := <-s.reqs:
				timer.Stop()
				return r, ok
			case <-timer.C:
			}
			continue
		}
		for s.walLen > 0 && len(s.reqs) == 0 {
			if err := s.materializeChunk(); err != nil {
				s.log.Error("event store: materializing the WAL failed; retrying later", "err", err)
				break
			}
		}
		if s.walLen > 0 {
			s.walSince = time.Now()
		}
	}
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

// carry gives a batch of appends about to launch a chunk of the WAL to
// materialize in its transaction when the WAL holds more than its limits,
// so moving the WAL costs no commit of its own and overlaps the preparing
// of the next batch like any flight. Past twice the limits, relieve
// materializes on its own first (backpressure).
func (s *Store) carry(b *batch) {
	if s.walOver(2) {
		s.relieve()
	}
	if s.holdWAL() || !s.walOver(1) || len(b.reqs) == 0 || b.t.base != nil {
		return
	}
	c, err := s.pickChunk(b.t)
	if err != nil {
		s.log.Error("event store: choosing WAL to materialize failed", "err", err)
		return
	}
	b.chunk = c
}

// relieve materializes a chunk when the WAL holds more than its limits,
// and keeps at it (the appends queued meanwhile wait: backpressure) while
// it holds more than twice as much, until it is back under them.
func (s *Store) relieve() {
	if s.holdWAL() {
		return
	}
	hard := s.walOver(2)
	for n := 0; s.walOver(1) && (n == 0 || hard); n++ {
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

func (s *Store) walOver(factor int) bool {
	l := s.limits
	return s.walRecs > factor*l.maxRecords || s.walBytes > factor*l.maxBytes || s.walLen > factor*l.maxRecords
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

// update runs fn in one transaction, writes what the batch changed and
// publishes it once the commit is synced. The afterCommit hook runs for
// callers' batches only.
func (s *Store) update(fn func(t *txn) error, callers bool) error {
	return s.updateTxn(&txn{s: s, pending: make(map[string]*pending)}, fn, callers)
}

// updateTxn is update on a txn that may hold prepared appends already.
func (s *Store) updateTxn(t *txn, fn func(t *txn) error, callers bool) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()

	start := time.Now()
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

// publish makes a committed transaction visible: resources, states, recent
// records and watermarks change together under one lock, then waiters wake.
// It also moves the WAL's bookkeeping: a sandbox written through the WAL
// grows its tail, one whose buckets were brought up to date loses it.
func (s *Store) publish(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.walLen == 0 && t.walPut > 0 {
		s.walSince = time.Now()
	}
	s.walLen += t.walPut - t.walDeleted
	if t.walEmptied {
		s.walLen = t.walPut
	}
	for _, p := range t.order {
		e := s.sandboxes[p.id]
		if p.dropped {
			if e != nil {
				s.dropTail(e, p.id)
				e.wake()
				delete(s.sandboxes, p.id)
			}
			continue
		}
		if p.created || e == nil {
			if e != nil {
				s.dropTail(e, p.id)
				e.wake()
			}
			e = &entry{ring: ring{from: p.base + 1}}
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
		for _, r := range p.recs {
			e.ring.push(r.rec, s.cacheSize)
		}
		// A record leaves the cache in the same critical section that
		// publishes the watermark which removes it, so the cache never
		// serves a pruned or compacted record.
		if p.pruned {
			through := uint64(p.state.Sandbox.PrunedThrough)
			e.ring.remove(func(id uint64) bool { return id <= through })
		}
		if len(p.compacted) > 0 {
			e.ring.remove(func(id uint64) bool { _, ok := p.compacted[id]; return ok })
		}
		e.wake()
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
