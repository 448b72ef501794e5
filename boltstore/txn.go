package boltstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// txn is one group-commit transaction: the writes of a batch and what each
// sandbox they touched looks like after them.
type txn struct {
	s       *Store
	root    *bbolt.Bucket
	pending map[string]*pending
	order   []*pending // in first-touch order; a recreated id appears twice
	dirty   bool
}

// pending is one sandbox as the batch changes it.
type pending struct {
	id     string
	b      *bbolt.Bucket
	events *bbolt.Bucket
	base   uint64         // last id before the batch
	state  *sandbox.State // the published state until owned
	owned  bool           // state is this batch's copy and may change in place

	changed, created, dropped, pruned bool

	recs      []sandbox.Record
	compacted map[uint64]struct{}
	turns     map[string]*sandbox.Turn
	approvals map[string]*sandbox.Approval
}

// sandbox returns the batch's view of a sandbox, loading its published state
// the first time the batch touches it.
func (t *txn) sandbox(id string) (*pending, error) {
	if p := t.pending[id]; p != nil {
		if p.dropped {
			return nil, notFound(id)
		}
		return p, nil
	}
	b := t.root.Bucket([]byte(id))
	if b == nil {
		return nil, notFound(id)
	}
	events := b.Bucket(bucketEvents)
	if events == nil {
		return nil, fmt.Errorf("sandbox %s: events bucket missing", id)
	}
	events.FillPercent = 1 // append-only: full pages, no room kept for inserts
	st, err := t.s.published(id, b)
	if err != nil {
		return nil, err
	}
	p := &pending{id: id, b: b, events: events, base: uint64(st.Sandbox.LastEventID), state: st}
	t.add(p)
	return p, nil
}

func (t *txn) add(p *pending) {
	t.pending[p.id] = p
	t.order = append(t.order, p)
}

// work returns the state for changes that cannot fail on their own.
func (p *pending) work() *sandbox.State {
	if !p.owned {
		p.state, p.owned = cloneState(p.state), true
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

// firstID returns the first retained id of the log, 0 if it is empty.
func (p *pending) firstID() uint64 {
	if k, _ := p.events.Cursor().First(); k != nil {
		return keyID(k)
	}
	return 0
}

// flush writes the records every changed sandbox keeps beside its log. Each
// is written once per batch, however many requests touched it.
func (t *txn) flush() error {
	for _, p := range t.order {
		if !p.changed || p.dropped {
			continue
		}
		meta, err := json.Marshal(p.state.Sandbox)
		if err != nil {
			return fmt.Errorf("sandbox %s: encode meta: %w", p.id, err)
		}
		state, err := json.Marshal(p.state)
		if err != nil {
			return fmt.Errorf("sandbox %s: encode state: %w", p.id, err)
		}
		if err := p.b.Put(keyMeta, meta); err != nil {
			return err
		}
		if err := p.b.Put(keyState, state); err != nil {
			return err
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

// published returns the published state of a sandbox for the committer,
// decoding it from the transaction when it is not cached. Only the committer
// calls it, holding commitMu, and before the batch has changed this sandbox,
// so the transaction shows exactly the published state.
func (s *Store) published(id string, b *bbolt.Bucket) (*sandbox.State, error) {
	s.mu.Lock()
	e := s.sandboxes[id]
	if e != nil && e.state != nil {
		st := e.state
		s.mu.Unlock()
		return st, nil
	}
	s.mu.Unlock()
	st, err := readState(b, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Installing the entry before the commit keeps Sandboxes honest: any
	// sandbox a commit in flight changes is already in memory, so a listing
	// takes its published values rather than the file's.
	if e = s.sandboxes[id]; e == nil {
		e = &entry{sb: st.Sandbox, ring: ring{from: uint64(st.Sandbox.LastEventID) + 1}}
		s.sandboxes[id] = e
	}
	e.state = st
	return st, nil
}

type appendWrite struct {
	id     string
	events []*sandbox.Event
	mutate func(*sandbox.State) error
	data   [][]byte // each event's encoded data
	folded []any    // each event's data decoded back, for the fold
	ids    []uint64 // assigned in the transaction, handed out after commit
}

// assignIDs hands the committed ids to the caller's events, in the caller's
// goroutine once the commit is acknowledged.
func (w *appendWrite) assignIDs() {
	for i, ev := range w.events {
		ev.ID = w.ids[i]
	}
}

func (w *appendWrite) apply(t *txn) (reqErr, txErr error) {
	p, err := t.sandbox(w.id)
	if err != nil {
		return err, nil
	}
	var st *sandbox.State
	if w.mutate != nil {
		// mutate may fail half-way: it changes a copy that is kept only if
		// it succeeds.
		st = cloneState(p.state)
		if err := callMutate(t.s.log, w.mutate, st); err != nil {
			return err, nil
		}
		// The watermarks belong to the log, not to the caller.
		st.Sandbox.LastEventID = p.state.Sandbox.LastEventID
		st.Sandbox.OldestEventID = p.state.Sandbox.OldestEventID
		st.Sandbox.PrunedThrough = p.state.Sandbox.PrunedThrough
		// A turn can exist before its turn.started (queued) only in the
		// state; keep it addressable by id. The state's turn, which mutate
		// may also have changed, wins over it.
		if c := st.Sandbox.CurrentTurn; c != nil {
			p.putTurn(cloneTurn(c))
		}
		if st.Turn != nil {
			p.putTurn(st.Turn)
		}
	} else {
		st = p.work()
	}
	for i, ev := range w.events {
		id, err := p.events.NextSequence()
		if err != nil {
			return nil, err
		}
		value, rec := encodeRecord(id, ev, w.id, w.data[i])
		if err := p.events.Put(idKey(id), value); err != nil {
			return nil, err
		}
		w.ids[i] = id
		p.recs = append(p.recs, rec)
		turn, appr := st.Apply(&sandbox.Event{
			ID: id, Type: ev.Type, TS: foldTime(ev.TS),
			SandboxID: w.id, TurnID: ev.TurnID, Data: w.folded[i],
		})
		if turn != nil {
			p.putTurn(turn)
		}
		if appr != nil {
			p.putApproval(appr)
		}
	}
	p.state, p.owned, p.changed = st, true, true
	t.dirty = true
	return nil, nil
}

// callMutate runs a caller's mutate in the committer goroutine. A panic there
// would take every sandbox's writes down, so it fails this request instead.
func callMutate(log *slog.Logger, mutate func(*sandbox.State) error, st *sandbox.State) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("append: mutate panicked", "sandbox", st.Sandbox.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("append to %s: mutate panicked: %v", st.Sandbox.ID, r)
		}
	}()
	return mutate(st)
}

type createWrite struct {
	sb     sandbox.Sandbox
	config []byte
}

func (w *createWrite) apply(t *txn) (reqErr, txErr error) {
	id := w.sb.ID
	if p := t.pending[id]; (p != nil && !p.dropped) || t.root.Bucket([]byte(id)) != nil {
		return sandbox.Errorf(sandbox.EConflict, "sandbox %s already exists", id), nil
	}
	b, err := t.root.CreateBucket([]byte(id))
	if err != nil {
		return nil, err
	}
	var events *bbolt.Bucket
	for _, name := range [][]byte{bucketEvents, bucketTurns, bucketApprovals} {
		nb, err := b.CreateBucket(name)
		if err != nil {
			return nil, err
		}
		if events == nil {
			events = nb
		}
	}
	events.FillPercent = 1
	if err := b.Put(keyConfig, w.config); err != nil {
		return nil, err
	}
	sb := w.sb
	sb.LastEventID, sb.OldestEventID, sb.PrunedThrough = 0, 0, 0
	t.add(&pending{
		id: id, b: b, events: events, state: &sandbox.State{Sandbox: sb},
		owned: true, changed: true, created: true,
	})
	t.dirty = true
	return nil, nil
}

type dropWrite struct{ id string }

func (w *dropWrite) apply(t *txn) (reqErr, txErr error) {
	if p := t.pending[w.id]; p != nil && p.dropped {
		return notFound(w.id), nil
	}
	err := t.root.DeleteBucket([]byte(w.id))
	if errors.Is(err, bbolt.ErrBucketNotFound) {
		return notFound(w.id), nil
	}
	if err != nil {
		return nil, err
	}
	p := t.pending[w.id]
	if p == nil {
		p = &pending{id: w.id}
		t.add(p)
	}
	p.dropped = true
	t.dirty = true
	return nil, nil
}

type pruneWrite struct {
	id      string
	through uint64
	batch   int
	removed int
}

func (w *pruneWrite) apply(t *txn) (reqErr, txErr error) {
	p, err := t.sandbox(w.id)
	if err != nil {
		return err, nil
	}
	// Collect first, delete after: deleting under a live cursor skips keys.
	var ids []uint64
	c := p.events.Cursor()
	for k, _ := c.First(); k != nil && len(ids) < w.batch; k, _ = c.Next() {
		id := keyID(k)
		if id > w.through {
			break
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	for _, id := range ids {
		if err := p.events.Delete(idKey(id)); err != nil {
			return nil, err
		}
	}
	st := p.work()
	st.Sandbox.PrunedThrough = max(st.Sandbox.PrunedThrough, sandbox.Seq(ids[len(ids)-1]))
	st.Sandbox.OldestEventID = sandbox.Seq(p.firstID())
	p.changed, p.pruned = true, true
	t.dirty = true
	w.removed = len(ids)
	return nil, nil
}

type compactWrite struct {
	id      string
	ids     []uint64
	removed int
}

func (w *compactWrite) apply(t *txn) (reqErr, txErr error) {
	p, err := t.sandbox(w.id)
	if err != nil {
		return err, nil
	}
	removed := 0
	for _, id := range w.ids {
		k := idKey(id)
		if p.events.Get(k) == nil {
			continue
		}
		if err := p.events.Delete(k); err != nil {
			return nil, err
		}
		if p.compacted == nil {
			p.compacted = make(map[uint64]struct{})
		}
		p.compacted[id] = struct{}{}
		removed++
	}
	if removed == 0 {
		return nil, nil
	}
	st := p.work()
	st.Sandbox.OldestEventID = sandbox.Seq(p.firstID())
	p.changed = true
	t.dirty = true
	w.removed = removed
	return nil, nil
}
