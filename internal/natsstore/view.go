package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// What this process knows of each sandbox (entry), serving Head, Wait and
// the listings from memory: kept current by the watch of state.*, by the
// states this process loads from the bucket, and by its own writes (see
// doc.go, "Visibility across processes").

// entry is what this process knows of one sandbox. wmu serializes this
// process's writes to it; the other fields are guarded by Store.mu. sb and
// state are never changed in place, only replaced, so a reader may keep
// what it took under the lock.
type entry struct {
	id  string
	wmu sync.Mutex

	sb    sandbox.Sandbox // the resource and watermarks as of rev
	rev   uint64          // revision of the state record that sb is from
	state *sandbox.State  // the whole state at rev; nil until needed
	wait  chan struct{}   // made on demand, closed by the next change
	gone  bool            // dropped

	// owner is the epoch of the fence that the state at rev records as
	// the log's holder (0: none recorded); known with state.
	owner uint64

	// tip and fence are the last messages of the sandbox's log and fence
	// subjects, as this process last confirmed them for the state at rev
	// (tipOK). An append expects the later of the two as the last sequence
	// of both subjects, which is how it finds events that another process
	// published and never folded, and a fence another node put up.
	tip   uint64
	fence uint64
	tipOK bool

	// unsure is this process's last append to the sandbox whose outcome
	// is unknown, kept so that the same events appended again are
	// recognised where they landed (see recognise); nil when there is
	// none. Guarded by wmu, not Store.mu.
	unsure *unsureAppend
}

func (e *entry) wake() {
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}

// watchLoop follows every change of a sandbox state in the bucket, by this
// process or another, so Head, Wait and listings follow them too.
func (s *Store) watchLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case kve, ok := <-s.watcher.Updates():
			if !ok {
				return
			}
			if kve != nil {
				s.hooks.Load().watched(kve.Key())
				s.applyWatch(kve)
			}
		}
	}
}

func (s *Store) applyWatch(kve jetstream.KeyValueEntry) {
	id, ok := cutKey(kve.Key(), "state.")
	if !ok {
		return
	}
	if kve.Operation() != jetstream.KeyValuePut {
		s.forget(id, kve.Revision())
		return
	}
	sb, err := decodeSandbox(kve.Value())
	if err != nil {
		s.log.Error("natsstore: undecodable sandbox state", "sandbox_id", id, "revision", kve.Revision(), "err", err)
		return
	}
	s.observe(id, sb, nil, 0, kve.Revision())
}

func cutKey(key, prefix string) (string, bool) {
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix {
		return "", false
	}
	return key[len(prefix):], true
}

// observe records a state revision of sandbox id, from the watch, a load or
// this process's own write, and wakes its waiters when it is news. st, when
// not nil, is the whole state of that revision and owner the holder it
// records. It returns the entry, or nil if the sandbox has been dropped
// since that revision.
func (s *Store) observe(id string, sb sandbox.Sandbox, st *sandbox.State, owner, rev uint64) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.dropped[id] {
		return nil
	}
	e := s.sandboxes[id]
	if e == nil {
		e = &entry{id: id}
		s.sandboxes[id] = e
		if i, found := slices.BinarySearch(s.ids, id); !found {
			s.ids = slices.Insert(s.ids, i, id)
		}
	}
	switch {
	case rev > e.rev:
		e.sb, e.rev, e.state, e.owner, e.tipOK = sb, rev, st, owner, false
		e.wake()
	case rev == e.rev && e.state == nil:
		e.state, e.owner = st, owner
	}
	return e
}

// forget removes a dropped sandbox and wakes its waiters; revisions up to
// rev that arrive late (the watch lags this process's own Drop) are ignored.
func (s *Store) forget(id string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sandboxes[id]
	if e != nil && e.rev > rev {
		return // recreated since
	}
	if rev > 0 {
		s.dropped[id] = max(s.dropped[id], rev)
	}
	if e == nil {
		return
	}
	e.gone = true
	e.wake()
	delete(s.sandboxes, id)
	if i, found := slices.BinarySearch(s.ids, id); found {
		s.ids = slices.Delete(s.ids, i, i+1)
	}
}

// setTip records the last messages of the log and fence subjects as
// confirmed for revision rev.
func (s *Store) setTip(e *entry, rev, tip, fence uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.rev == rev {
		e.tip, e.fence, e.tipOK = tip, fence, true
	}
}

// invalidate drops the cached whole state of a sandbox after a write whose
// outcome is unknown, so the next write loads it again from the bucket.
func (s *Store) invalidate(e *entry) {
	s.mu.Lock()
	e.state, e.tipOK = nil, false
	s.mu.Unlock()
}

// lookup returns the entry of sandbox id. One not known here yet (created
// by another process a moment ago, ahead of the watch) is read from the
// bucket.
func (s *Store) lookup(ctx context.Context, id string) (*entry, error) {
	if !validID(id) {
		return nil, notFound(id)
	}
	s.mu.Lock()
	e := s.sandboxes[id]
	s.mu.Unlock()
	if e != nil {
		return e, nil
	}
	e, _, err := s.fetch(ctx, id)
	return e, err
}

// stored is one revision of a sandbox's state record.
type stored struct {
	st    *sandbox.State
	owner uint64 // the epoch of the log's holder it records
	rev   uint64
}

// fetch reads the state of sandbox id from the bucket and records it.
func (s *Store) fetch(ctx context.Context, id string) (*entry, stored, error) {
	return s.fetchFrom(ctx, id, s.kv.Get)
}

// fetchLatest is fetch from the bucket's leader, which has every state the
// bucket acknowledged, where a replica that answers a direct get may be
// behind: for a cursor beyond what this process knows, which comes from
// something another process wrote.
func (s *Store) fetchLatest(ctx context.Context, id string) (*entry, stored, error) {
	return s.fetchFrom(ctx, id, func(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
		return s.leaderGet(ctx, s.kv.Bucket(), key)
	})
}

func (s *Store) fetchFrom(ctx context.Context, id string, get func(context.Context, string) (jetstream.KeyValueEntry, error)) (*entry, stored, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kve, err := get(ctx, stateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.mu.Lock()
		e := s.sandboxes[id]
		var rev uint64
		if e != nil {
			rev = e.rev
		}
		s.mu.Unlock()
		if e != nil {
			s.forget(id, rev) // dropped by another process, ahead of the watch
		}
		return nil, stored{}, notFound(id)
	}
	if err != nil {
		return nil, stored{}, fmt.Errorf("sandbox %s: read state: %w", id, err)
	}
	st, owner, err := decodeState(kve.Value())
	if err != nil {
		return nil, stored{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if st.LogBytes == 0 && st.Sandbox.OldestEventID != 0 {
		// Written before the state counted its log's bytes: counted here,
		// and stored with the sandbox's next write.
		if st.LogBytes, err = s.rangeBytes(ctx, id, uint64(st.Sandbox.PrunedThrough)+1, uint64(st.Sandbox.LastEventID)); err != nil {
			return nil, stored{}, err
		}
	}
	e := s.observe(id, st.Sandbox, st, owner, kve.Revision())
	if e == nil {
		return nil, stored{}, notFound(id)
	}
	return e, stored{st: st, owner: owner, rev: kve.Revision()}, nil
}
