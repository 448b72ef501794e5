package boltstore

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The WAL's replay at open (see doc.go, Crash replay): the entries a crash
// left in the WAL, applied to the buckets of their sandboxes.

// replaying is one sandbox as replayWAL brings its buckets up to date.
type replaying struct {
	b, events *bbolt.Bucket // nil for a sandbox that no longer exists
	state     *sandbox.State
	mark      uint64 // the last WAL key applied
	held      uint64 // the WAL mark the buckets had: entries up to it are in them
	changed   bool
	turns     map[string]*sandbox.Turn
	approvals map[string]*sandbox.Approval
}

// replayWAL applies every WAL entry that its sandbox's buckets do not hold
// yet (its key is above the sandbox's WAL mark) and empties the WAL, in the
// transaction that opens the store. The records go to the events bucket
// with their ids, the state is redone as the committer did it (the stored
// post-mutate state, then the fold of each record), and the sequence is set
// to the last id, so ids continue where they were.
//
// The unsettled bucket u follows each meta it writes.
func replayWAL(tx *bbolt.Tx, u *bbolt.Bucket) (applied int, err error) {
	wal, err := tx.CreateBucketIfNotExists(bucketWAL)
	if err != nil {
		return 0, err
	}
	root := tx.Bucket(bucketSandboxes)
	sbs := make(map[string]*replaying)
	var order []string
	var keys []uint64
	err = eachWALEntry(wal, func(key uint64, ent walEntry) error {
		if len(keys) == 0 || keys[len(keys)-1] != key {
			keys = append(keys, key)
		}
		r := sbs[ent.sandbox]
		if r == nil {
			var err error
			if r, err = openReplaying(root, ent.sandbox); err != nil {
				return err
			}
			sbs[ent.sandbox] = r
			order = append(order, ent.sandbox)
		}
		if r.b == nil || key <= r.held {
			return nil // dropped since, or materialized
		}
		if err := r.apply(ent); err != nil {
			return fmt.Errorf("WAL entry %d: sandbox %s: %w", key, ent.sandbox, err)
		}
		r.mark, r.changed = key, true
		applied++
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, id := range order {
		if r := sbs[id]; r.changed {
			if err := r.flush(id); err != nil {
				return 0, err
			}
			if err := markUnsettled(u, id, r.state.Sandbox); err != nil {
				return 0, err
			}
		}
	}
	for _, key := range keys {
		if err := wal.Delete(idKey(key)); err != nil {
			return 0, err
		}
	}
	return applied, nil
}

func openReplaying(root *bbolt.Bucket, id string) (*replaying, error) {
	r := &replaying{}
	b := root.Bucket([]byte(id))
	if b == nil {
		return r, nil
	}
	events := b.Bucket(bucketEvents)
	if events == nil {
		return nil, fmt.Errorf("sandbox %s: events bucket missing", id)
	}
	events.FillPercent = 1
	st, err := readState(b, id)
	if err != nil {
		return nil, err
	}
	r.b, r.events, r.state, r.mark = b, events, st, readWALMark(b)
	r.held = r.mark
	return r, nil
}

func (r *replaying) apply(ent walEntry) error {
	st := r.state
	if ent.state != nil {
		mutated := new(sandbox.State)
		if err := json.Unmarshal(ent.state, mutated); err != nil {
			return fmt.Errorf("decode state: %w", err)
		}
		// The lists the entry leaves out are the state's before it.
		if ent.lists&(1<<0) == 0 {
			mutated.Messages = st.Messages
		}
		if ent.lists&(1<<1) == 0 {
			mutated.Tools = st.Tools
		}
		if ent.lists&(1<<2) == 0 {
			mutated.Approvals = st.Approvals
		}
		mutated.Sandbox.LastEventID = st.Sandbox.LastEventID
		mutated.Sandbox.OldestEventID = st.Sandbox.OldestEventID
		mutated.Sandbox.PrunedThrough = st.Sandbox.PrunedThrough
		mutated.LogBytes, mutated.TurnBytes = st.LogBytes, st.TurnBytes
		st = mutated
		if c := st.Sandbox.CurrentTurn; c != nil {
			r.putTurn(c.Clone())
		}
		if st.Turn != nil {
			r.putTurn(st.Turn)
		}
	}
	for _, wr := range ent.recs {
		if want := uint64(st.Sandbox.LastEventID) + 1; wr.id != want {
			return fmt.Errorf("event %d where %d was next", wr.id, want)
		}
		rec, err := decodeRecord(idKey(wr.id), wr.value)
		if err != nil {
			return err
		}
		ev, err := rec.Decode()
		if err != nil {
			return fmt.Errorf("event %d: %w", wr.id, err)
		}
		if err := r.events.Put(idKey(wr.id), bytes.Clone(wr.value)); err != nil {
			return err
		}
		st.Appended(rec.Type, len(rec.JSON))
		turn, appr := st.Apply(&ev)
		if turn != nil {
			r.putTurn(turn)
		}
		if appr != nil {
			if r.approvals == nil {
				r.approvals = make(map[string]*sandbox.Approval)
			}
			r.approvals[appr.ID] = appr
		}
	}
	r.state = st
	return nil
}

func (r *replaying) putTurn(t *sandbox.Turn) {
	if r.turns == nil {
		r.turns = make(map[string]*sandbox.Turn)
	}
	r.turns[t.ID] = t
}

func (r *replaying) flush(id string) error {
	if err := r.events.SetSequence(uint64(r.state.Sandbox.LastEventID)); err != nil {
		return err
	}
	meta, err := json.Marshal(r.state.Sandbox)
	if err != nil {
		return fmt.Errorf("sandbox %s: encode meta: %w", id, err)
	}
	if err := r.b.Put(keyMeta, meta); err != nil {
		return err
	}
	if err := putState(r.b, r.state); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if err := r.b.Put(keyWALMark, idKey(r.mark)); err != nil {
		return err
	}
	if err := putJSON(r.b.Bucket(bucketTurns), r.turns); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if err := putJSON(r.b.Bucket(bucketApprovals), r.approvals); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return nil
}

func readWALMark(b *bbolt.Bucket) uint64 {
	if v := b.Get(keyWALMark); len(v) == 8 {
		return keyID(v)
	}
	return 0
}
