package boltstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// txn is one transaction of the committer: the writes of a batch, or a
// materialization, and what each sandbox they touched looks like after them.
type txn struct {
	s       *Store
	root    *bbolt.Bucket // sandboxes
	wal     *bbolt.Bucket
	settle  *bbolt.Bucket // unsettled
	pending map[string]*pending
	order   []*pending // in first-touch order; a recreated id appears twice
	dirty   bool

	walPut, walDeleted int  // WAL entries written and truncated
	walEmptied         bool // truncation left nothing but walPut entries

	wrote time.Duration // bbolt's write time of the commit: page writes and syncs
}

// pending is one sandbox as the transaction changes it.
//
// A sandbox starts in WAL mode: its records and post-mutate states go to
// the WAL, its own buckets are not touched. It switches to direct mode when
// the transaction materializes it (a prune or a compaction needs its
// buckets complete, or the committer moves the WAL) or creates it; from
// then on its records go to its events bucket and flush rewrites its meta,
// state and resources.
type pending struct {
	id     string
	e      *entry        // the published entry; nil for one created here
	b      *bbolt.Bucket // the sandbox's buckets, opened in direct mode
	events *bbolt.Bucket
	state  *sandbox.State // the published state until owned
	owned  bool           // state is this transaction's copy and may change in place

	changed bool // what readers see changes: publish and wake
	direct  bool
	moved   bool   // materialize moved records or changes into the buckets
	walMark uint64 // the last WAL key whose changes the buckets now hold

	created, dropped bool

	recs      []stored // the transaction's new records, ids increasing
	entries   [][]byte // WAL entries to write, in WAL mode
	walKeys   []uint64 // the WAL entries written for this sandbox
	walBytes  int      // the size of their records
	turns     map[string]*sandbox.Turn
	approvals map[string]*sandbox.Approval
}

// begin binds the transaction to its bbolt transaction.
func (t *txn) begin(tx *bbolt.Tx) error {
	wal, err := tx.CreateBucketIfNotExists(bucketWAL)
	if err != nil {
		return err
	}
	wal.FillPercent = 1 // append-only: full pages, no room kept for inserts
	t.root, t.wal, t.settle = tx.Bucket(bucketSandboxes), wal, tx.Bucket(bucketUnsettled)
	if t.settle == nil {
		return errors.New("the unsettled bucket is missing")
	}
	tx.OnCommit(func() {
		st := tx.Stats()
		t.wrote = st.GetWriteTime()
	})
	return nil
}

// sandbox returns the transaction's view of a sandbox, loading its
// published state the first time the transaction touches it.
func (t *txn) sandbox(id string) (*pending, error) {
	if p := t.pending[id]; p != nil {
		if p.dropped {
			return nil, notFound(id)
		}
		return p, nil
	}
	e, st, err := t.s.published(t, id)
	if err != nil {
		return nil, err
	}
	p := &pending{id: id, e: e, state: st}
	t.add(p)
	return p, nil
}

func (t *txn) add(p *pending) {
	t.pending[p.id] = p
	t.order = append(t.order, p)
}

// open opens the sandbox's buckets for direct writes.
func (t *txn) open(p *pending) error {
	if p.b != nil {
		return nil
	}
	b := t.root.Bucket([]byte(p.id))
	if b == nil {
		return fmt.Errorf("sandbox %s: bucket missing", p.id)
	}
	events := b.Bucket(bucketEvents)
	if events == nil {
		return fmt.Errorf("sandbox %s: events bucket missing", p.id)
	}
	events.FillPercent = 1 // append-only: full pages, no room kept for inserts
	p.b, p.events = b, events
	return nil
}

// materialize brings the sandbox's buckets up to date: the records and
// resources of earlier transactions that only the WAL holds (kept in memory
// since), and those of this one. It switches the sandbox to direct mode.
func (t *txn) materialize(p *pending) error {
	if p.direct {
		return nil
	}
	p.direct = true
	tail := p.e != nil && p.e.wal != nil
	if !tail && len(p.recs) == 0 && len(p.entries) == 0 {
		return t.open(p) // nothing only the WAL holds
	}
	if err := t.open(p); err != nil {
		return err
	}
	if tail {
		w := p.e.wal
		if err := putRecords(p.events, w.recs); err != nil {
			return err
		}
		// The transaction's own changes are newer than the tail's.
		for id, v := range w.turns {
			if _, ok := p.turns[id]; !ok {
				p.putTurn(v)
			}
		}
		for id, v := range w.approvals {
			if _, ok := p.approvals[id]; !ok {
				p.putApproval(v)
			}
		}
		p.walMark = w.keys[len(w.keys)-1]
	}
	// The records of this transaction go to the bucket instead of the WAL.
	if err := putRecords(p.events, p.recs); err != nil {
		return err
	}
	p.entries = nil
	p.moved, t.dirty = true, true
	return nil
}

func putRecords(events *bbolt.Bucket, recs []stored) error {
	for _, r := range recs {
		if err := events.Put(idKey(r.rec.ID), r.value); err != nil {
			return err
		}
	}
	return nil
}

// work returns the state for changes that cannot fail on their own: the
// fold of events and the watermarks.
func (p *pending) work() *sandbox.State {
	if !p.owned {
		p.state, p.owned = foldClone(p.state), true
	}
	return p.state
}

func (p *pending) putTurn(t *sandbox.Turn) {
	if p.turns == nil {
		p.turns = make(map[string]*sandbox.Turn)
	}
	p.turns[t.ID] = t
}

func (p *pending) putApproval(a *sandbox.Approval) {
	if p.approvals == nil {
		p.approvals = make(map[string]*sandbox.Approval)
	}
	p.approvals[a.ID] = a
}

// firstID returns the first retained id of the log, 0 if it is empty. The
// sandbox must be in direct mode.
func (p *pending) firstID() uint64 {
	if k, _ := p.events.Cursor().First(); k != nil {
		return keyID(k)
	}
	return 0
}

// flush writes the WAL entries of the sandboxes in WAL mode, and what every
// sandbox in direct mode keeps beside its log: the events bucket's
// sequence, meta, state, the WAL mark and the resources. Each is written
// once per transaction, however many requests touched it.
func (t *txn) flush() error {
	var logged []*pending
	for _, p := range t.order {
		if !p.dropped && !p.direct {
			logged = append(logged, p)
		}
	}
	if err := t.putWAL(logged); err != nil {
		return err
	}
	for _, p := range t.order {
		if p.dropped {
			// In order: an id dropped and created again in this
			// transaction appears twice, the created one last.
			if err := setUnsettled(t.settle, p.id, false); err != nil {
				return err
			}
			continue
		}
		if !p.direct {
			continue
		}
		if !p.changed && !p.moved {
			continue
		}
		// The sequence is the last id handed out, which ids come from when
		// the sandbox is next loaded; the WAL mark tells a replay which
		// entries the buckets already hold.
		if err := p.events.SetSequence(uint64(p.state.Sandbox.LastEventID)); err != nil {
			return err
		}
		if p.walMark > 0 {
			if err := p.b.Put(keyWALMark, idKey(p.walMark)); err != nil {
				return err
			}
		}
		meta, err := json.Marshal(p.state.Sandbox)
		if err != nil {
			return fmt.Errorf("sandbox %s: encode meta: %w", p.id, err)
		}
		if err := p.b.Put(keyMeta, meta); err != nil {
			return err
		}
		if err := markUnsettled(t.settle, p.id, p.state.Sandbox); err != nil {
			return err
		}
		if err := putState(p.b, p.state); err != nil {
			return fmt.Errorf("sandbox %s: %w", p.id, err)
		}
		if err := putJSON(p.b.Bucket(bucketTurns), p.turns); err != nil {
			return fmt.Errorf("sandbox %s: %w", p.id, err)
		}
		if err := putJSON(p.b.Bucket(bucketApprovals), p.approvals); err != nil {
			return fmt.Errorf("sandbox %s: %w", p.id, err)
		}
	}
	return nil
}

func putJSON[T any](b *bbolt.Bucket, m map[string]*T) error {
	if len(m) == 0 {
		return nil
	}
	if b == nil {
		return errors.New("resource bucket missing")
	}
	for id, v := range m {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", id, err)
		}
		if err := b.Put([]byte(id), data); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) lastIDs() map[string]uint64 {
	last := make(map[string]uint64, len(t.order))
	for _, p := range t.order {
		if p.changed && !p.dropped {
			last[p.id] = uint64(p.state.Sandbox.LastEventID)
		}
	}
	return last
}

// published returns the entry and published state of a sandbox for the
// committer, decoding the state from the file when it is not in memory.
// Only the committer calls it, holding commitMu, and before the
// transaction has changed this sandbox, so the file shows exactly the
// published state: a sandbox with a WAL tail always has its state in
// memory.
func (s *Store) published(t *txn, id string) (*entry, *sandbox.State, error) {
	s.mu.RLock()
	e := s.sandboxes[id]
	if e != nil && e.state != nil {
		st := e.state
		s.mu.RUnlock()
		return e, st, nil
	}
	s.mu.RUnlock()
	b := t.root.Bucket([]byte(id))
	if b == nil {
		return nil, nil, notFound(id)
	}
	st, err := readState(b, id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Installing the entry before the commit keeps Sandboxes honest: any
	// sandbox a commit changes is already in memory, so a listing takes
	// its published values rather than the file's.
	if e = s.sandboxes[id]; e == nil {
		e = &entry{sb: st.Sandbox}
		s.sandboxes[id] = e
	}
	e.state = st
	return e, st, nil
}
