package boltstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

type appendWrite struct {
	id     string
	events []*sandbox.Event
	mutate func(*sandbox.State) error
	envs   [][]byte // each event's envelope after its id
	data   [][]byte // each event's encoded data, where envs has none
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
	var mutated []byte // the post-mutate state, which a replay cannot derive
	var lists byte     // which of its lists mutated carries
	if w.mutate != nil {
		// mutate may fail half-way: it changes a copy that is kept only if
		// it succeeds.
		st = p.state.Clone()
		if err := callMutate(t.s.log, w.mutate, st); err != nil {
			return err, nil
		}
		// The watermarks belong to the log, not to the caller.
		st.Sandbox.LastEventID = p.state.Sandbox.LastEventID
		st.Sandbox.OldestEventID = p.state.Sandbox.OldestEventID
		st.Sandbox.PrunedThrough = p.state.Sandbox.PrunedThrough
		st.LogBytes, st.TurnBytes = p.state.LogBytes, p.state.TurnBytes
		if !p.direct {
			if mutated, lists, err = encodeMutated(p.state, st); err != nil {
				return fmt.Errorf("append to %s: encode state: %w", w.id, err), nil
			}
		}
		mutatedTurns(p, st)
	} else {
		st = p.work()
	}
	for i, ev := range w.events {
		// Ids continue the published last id, which is the events bucket's
		// sequence or was restored from the WAL by a replay.
		id := uint64(st.Sandbox.LastEventID) + 1
		w.ids[i] = id
		st.Appended(ev.Type, w.valueLen(i)-1-len(ev.Type))
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
	if p.direct {
		first := len(p.recs)
		for i := range w.events {
			value := w.appendValue(make([]byte, 0, w.valueLen(i)), i)
			p.recs = append(p.recs, w.storedAt(i, value))
		}
		return nil, putRecords(p.events, p.recs[first:])
	}
	if mutated != nil || len(w.events) > 0 {
		p.addWAL(mutated, lists, w)
	}
	return nil, nil
}

// encodeMutated encodes what a replay needs of the state a mutate left:
// its head, and those of its lists that the mutate changed, which lists
// says (bit i for stateLists[i]). A status change on a sandbox in a long
// turn wrote every item of the state into the WAL as one value (41 MiB
// at a clean stop before the state kept only the recent finished tools);
// the head is a few hundred bytes. Comparing the lists costs what the
// clone mutate changed already cost.
func encodeMutated(before, after *sandbox.State) ([]byte, byte, error) {
	head := *after
	var lists byte
	if !reflect.DeepEqual(before.Messages, after.Messages) {
		lists |= 1 << 0
	} else {
		head.Messages = nil
	}
	if !reflect.DeepEqual(before.Tools, after.Tools) {
		lists |= 1 << 1
	} else {
		head.Tools = nil
	}
	if !reflect.DeepEqual(before.Approvals, after.Approvals) {
		lists |= 1 << 2
	} else {
		head.Approvals = nil
	}
	b, err := json.Marshal(&head)
	return b, lists, err
}

// mutatedTurns keeps the turns a mutate set addressable by id: a turn exists
// before its turn.started (queued) only in the state. The state's turn, which
// mutate may also have changed, wins over it. A replay of the WAL does the
// same with the state it stored.
func mutatedTurns(p *pending, st *sandbox.State) {
	if c := st.Sandbox.CurrentTurn; c != nil {
		p.putTurn(c.Clone())
	}
	if st.Turn != nil {
		p.putTurn(st.Turn)
	}
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
	// WAL entries so far belong to earlier sandboxes of this id, dropped
	// since: a replay must not give them to this one.
	t.add(&pending{
		id: id, b: b, events: events, state: &sandbox.State{Sandbox: sb},
		owned: true, changed: true, created: true, direct: true, walMark: t.wal.Sequence(),
	})
	t.dirty = true
	return nil, nil
}

// dropWrite deletes the sandbox's buckets. Its WAL entries stay until the
// WAL is truncated past them; a replay skips entries of sandboxes that do
// not exist.
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
	more    bool // events <= through are left for another batch
}

func (w *pruneWrite) apply(t *txn) (reqErr, txErr error) {
	p, err := t.sandbox(w.id)
	if err != nil {
		return err, nil
	}
	if err := t.materialize(p); err != nil {
		return nil, err
	}
	// Collect first, delete after: deleting under a live cursor skips keys.
	var ids []uint64
	var size uint64
	c := p.events.Cursor()
	for k, v := c.First(); k != nil && keyID(k) <= w.through; k, v = c.Next() {
		if len(ids) == w.batch {
			w.more = true
			break
		}
		ids = append(ids, keyID(k))
		size += recordBytes(v)
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
	st.Removed(size)
	p.changed = true
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
	if err := t.materialize(p); err != nil {
		return nil, err
	}
	removed := 0
	var size uint64
	for _, id := range w.ids {
		k := idKey(id)
		v := p.events.Get(k)
		if v == nil {
			continue
		}
		size += recordBytes(v)
		if err := p.events.Delete(k); err != nil {
			return nil, err
		}
		removed++
	}
	if removed == 0 {
		return nil, nil
	}
	st := p.work()
	st.Sandbox.OldestEventID = sandbox.Seq(p.firstID())
	st.Removed(size)
	p.changed = true
	t.dirty = true
	w.removed = removed
	return nil, nil
}

// flushWrite asks the committer to materialize the whole WAL before the
// batch it is in; err is what that gave.
type flushWrite struct{ err error }

func (w *flushWrite) apply(*txn) (reqErr, txErr error) { return w.err, nil }
