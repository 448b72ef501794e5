package natsstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Prune removes every event of sandbox id with an id <= through and
// advances pruned_through (to the highest id removed, never backwards) and
// oldest_event_id. The watermarks are stored first and the events purged
// after: readers start after pruned_through, so from the moment it moves
// nothing at or below it is served, and a process that dies in between
// leaves only unreachable events, which the next prune removes. The
// log's byte count moves with the watermarks, by the size of the retained
// events up to the new pruned_through, which the prune reads for it: a
// purge says how many messages it removed, not their bytes.
//
// batch is accepted for the retention loop's interface and not needed:
// JetStream purges a range of a subject as one operation on the server,
// with no transaction for appends to queue behind.
func (s *Store) Prune(ctx context.Context, id string, through uint64, batch int) (removed int, err error) {
	return s.prune(ctx, id, math.MaxUint64, through)
}

// PruneFrom is Prune on the condition that the log of sandbox id is pruned
// through no further than from (retention.FromPruner). The retention loop
// of each node finds its cut by counting the events after the
// pruned_through it listed, from what this process knows; another node's
// prune since, which this process's watch may not have delivered yet,
// leaves that count too high and the cut too far, so that the two prunes
// together would keep fewer events than the limit. The condition is
// checked on the state that the revision-checked update of the watermarks
// is made from, so it holds when they move, and the purge removes nothing
// above them. Refused, it removes nothing and returns an error of type
// sandbox.ECursorPruned: the loop counts the log afresh.
func (s *Store) PruneFrom(ctx context.Context, id string, from, through uint64, batch int) (removed int, err error) {
	return s.prune(ctx, id, from, through)
}

func (s *Store) prune(ctx context.Context, id string, from, through uint64) (removed int, err error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return 0, err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	var high uint64
	rev, v, err := s.commitMarks(ctx, e, "prune", func(st *sandbox.State, _ *uint64) (bool, error) {
		pruned := uint64(st.Sandbox.PrunedThrough)
		if pruned > from {
			m := st.Marks()
			return false, &sandbox.Error{Type: sandbox.ECursorPruned, Marks: &m, Message: fmt.Sprintf(
				"pruned through %d by another process since the cut through %d was counted from %d", pruned, through, from)}
		}
		upTo := min(through, uint64(st.Sandbox.LastEventID))
		if upTo <= pruned {
			return false, nil
		}
		var err error
		if high, err = s.lastSeq(ctx, s.subject(id), upTo); err != nil || high <= pruned {
			return false, err // nothing retained up to there (compacted away)
		}
		oldest, err := s.firstAfter(ctx, id, high, uint64(st.Sandbox.LastEventID))
		if err != nil {
			return false, err
		}
		size, err := s.rangeBytes(ctx, id, pruned+1, high)
		if err != nil {
			return false, err
		}
		st.Sandbox.PrunedThrough, st.Sandbox.OldestEventID = sandbox.Seq(high), sandbox.Seq(oldest)
		st.Removed(size)
		return true, nil
	})
	if err != nil || rev == 0 {
		return 0, err
	}
	n, err := s.purge(ctx, s.streamName, s.subject(id), high+1)
	if err != nil {
		s.invalidate(e)
		return 0, fmt.Errorf("prune %s: %w", id, err)
	}
	tip := v.tip
	if high >= tip {
		tip = 0 // the subject is empty now
	}
	s.setTip(e, rev, tip, v.fence)
	return int(n), nil
}

// commitMarks moves the watermarks (or the owner) of a sandbox: change sees
// a copy of its state and its owner and moves them, or reports that
// nothing is to change (rev 0). A revision conflict loads the state again
// and asks again. The caller holds e.wmu. It returns the new revision and
// the view it was made from.
func (s *Store) commitMarks(ctx context.Context, e *entry, op string, change func(st *sandbox.State, owner *uint64) (bool, error)) (uint64, view, error) {
	for attempt := 1; ; attempt++ {
		v, err := s.loadForWrite(ctx, e, nil)
		if err != nil {
			return 0, view{}, err
		}
		work, owner := v.st.Clone(), v.owner
		ok, err := change(work, &owner)
		if err != nil {
			return 0, view{}, fmt.Errorf("%s %s: %w", op, e.id, err)
		}
		if !ok {
			return 0, view{}, nil
		}
		newRev, err := s.commit(ctx, e.id, work, owner, v.rev, changes{})
		if isConflict(err) && attempt < maxConflicts {
			s.invalidate(e)
			Backoff(ctx, attempt)
			continue
		}
		if err != nil {
			s.invalidate(e)
			return 0, view{}, fmt.Errorf("%s %s: %w", op, e.id, err)
		}
		s.observe(e.id, work.Sandbox, work, owner, newRev)
		s.setTip(e, newRev, v.tip, v.fence)
		return newRev, v, nil
	}
}

// firstAfter returns the id of the first retained event of sandbox id after
// seq and up to last, 0 if there is none.
func (s *Store) firstAfter(ctx context.Context, id string, seq, last uint64) (uint64, error) {
	if seq >= last {
		return 0, nil
	}
	msgs, err := s.getBatch(ctx, s.subject(id), seq+1, 1, 0, last)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	first, err := msgSeq(msgs[0])
	if err != nil || first > last {
		return 0, err
	}
	return first, nil
}

// Compact deletes the given events from anywhere in the log of sandbox id
// (superseded message snapshots of finished turns). Ids that are not in its
// log are skipped: each is checked to be an event of this sandbox before it
// is deleted, since the stream is shared by all of them. pruned_through
// does not move; oldest_event_id does when the first retained event goes.
//
// The log's byte count is stored after the deletes, less the events this
// call deleted that are still above pruned_through then: a prune by
// another process in between counted those below it already. A process
// that dies in between leaves the count high by what it deleted, which
// makes retention prune a little early, never late.
func (s *Store) Compact(ctx context.Context, id string, ids []uint64) (removed int, err error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return 0, err
	}
	marks := s.marks(e)
	subject := s.subject(id)
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var first bool
	sizes := map[uint64]uint64{} // deleted here: id -> bytes
	for _, seq := range ids {
		if seq <= uint64(marks.PrunedThrough) || seq > uint64(marks.LastEventID) {
			continue
		}
		msg, err := s.getMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("compact %s: %w", id, err)
		}
		if msg.Subject != subject {
			continue
		}
		// Another node's retention pass may compact the same events at the
		// same moment: one that it removed first is removed all the same.
		ok, err := s.deleteMsg(ctx, seq)
		if err != nil {
			return removed, fmt.Errorf("compact %s: delete %d: %w", id, seq, err)
		}
		if !ok {
			continue
		}
		removed++
		sizes[seq] = uint64(servedLen(seq, msg.Data))
		first = first || seq == uint64(marks.OldestEventID)
		s.mu.Lock()
		if e.tip == seq {
			e.tipOK = false // the subject's last message is another one now
		}
		s.mu.Unlock()
	}
	if removed == 0 {
		return 0, nil
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	_, _, err = s.commitMarks(ctx, e, "compact", func(st *sandbox.State, _ *uint64) (bool, error) {
		var size uint64
		for seq, n := range sizes {
			if seq > uint64(st.Sandbox.PrunedThrough) {
				size += n
			}
		}
		changed := size > 0
		st.Removed(size)
		if first {
			// The first retained event went: oldest_event_id moves to the next.
			oldest, err := s.firstAfter(ctx, id, uint64(st.Sandbox.PrunedThrough), uint64(st.Sandbox.LastEventID))
			if err != nil {
				return false, err
			}
			changed = changed || oldest != uint64(st.Sandbox.OldestEventID)
			st.Sandbox.OldestEventID = sandbox.Seq(oldest)
		}
		return changed, nil
	})
	return removed, err
}

// rangeBytes reads the size of the retained events of sandbox id with ids
// in [from, to] (sandbox.State.LogBytes).
func (s *Store) rangeBytes(ctx context.Context, id string, from, to uint64) (uint64, error) {
	var n uint64
	for from <= to {
		msgs, err := s.getBatch(ctx, s.subject(id), from, 256, readBytes, to)
		if err != nil {
			return 0, fmt.Errorf("sandbox %s: %w", id, err)
		}
		if len(msgs) == 0 {
			return n, nil
		}
		for _, msg := range msgs {
			seq, err := msgSeq(msg)
			if err != nil {
				return 0, err
			}
			if seq > to {
				return n, nil
			}
			n += uint64(servedLen(seq, msg.Data))
			from = seq + 1
		}
	}
	return n, nil
}

// LogBytes returns the bytes the retained log of sandbox id holds and those
// its current or last turn took (sandbox.State.LogBytes and TurnBytes):
// from the state this process holds, else from the bucket.
func (s *Store) LogBytes(id string) (log, turn uint64, err error) {
	if err := s.enter(); err != nil {
		return 0, 0, err
	}
	defer s.leave()
	ctx := context.Background()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	st := e.state
	s.mu.Unlock()
	if st == nil {
		_, cur, err := s.fetch(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		st = cur.st
	}
	return st.LogBytes, st.TurnBytes, nil
}

func (s *Store) getMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	return s.stream.GetMsg(ctx, seq)
}

// Drop removes a sandbox whole: its log, turns, approvals, config and
// state. The state goes last, so a drop cut short leaves the sandbox listed
// and the next Drop finishes it.
func (s *Store) Drop(ctx context.Context, id string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	for _, subject := range []string{s.subject(id), s.fenceSubject(id)} {
		if _, err := s.purge(ctx, s.streamName, subject, 0); err != nil {
			return fmt.Errorf("drop %s: %w", id, err)
		}
	}
	for _, prefix := range []string{"turn.", "appr."} {
		if _, err := s.purge(ctx, s.kvStream, s.kvPrefix+prefix+id+".>", 0); err != nil {
			return fmt.Errorf("drop %s: %w", id, err)
		}
	}
	if err := s.kv.Purge(ctx, configKey(id)); err != nil {
		return fmt.Errorf("drop %s: config: %w", id, err)
	}
	if err := s.kv.Purge(ctx, markKey(id)); err != nil {
		return fmt.Errorf("drop %s: compaction mark: %w", id, err)
	}
	s.mu.Lock()
	rev := e.rev
	s.mu.Unlock()
	if err := s.kv.Purge(ctx, stateKey(id)); err != nil {
		return fmt.Errorf("drop %s: state: %w", id, err)
	}
	s.forget(id, rev)
	s.mu.Lock()
	delete(s.holds, id)
	s.mu.Unlock()
	return nil
}

// Stats describes the stream and every sandbox's log.
type Stats struct {
	Messages  uint64 // messages in the stream, of every sandbox
	Bytes     uint64 // bytes the stream holds
	Sandboxes []SandboxStats
}

// SandboxStats describes one sandbox's log.
type SandboxStats struct {
	ID            string
	Status        string
	Events        int // messages in its subject (retained events)
	OldestEventID uint64
	LastEventID   uint64
	PrunedThrough uint64
}

// Stats reads the stream's per-subject counts in one request (paged by
// the client for many subjects) and every sandbox's watermarks from memory.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	if err := s.enter(); err != nil {
		return Stats{}, err
	}
	defer s.leave()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.subjectPrefix+".*"))
	if err != nil {
		return Stats{}, fmt.Errorf("stream %s: %w", s.streamName, err)
	}
	st := Stats{Messages: info.State.Msgs, Bytes: info.State.Bytes}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.ids {
		sb := s.sandboxes[id].sb
		st.Sandboxes = append(st.Sandboxes, SandboxStats{
			ID:            id,
			Status:        sb.Status,
			Events:        int(info.State.Subjects[s.subject(id)]),
			OldestEventID: uint64(sb.OldestEventID),
			LastEventID:   uint64(sb.LastEventID),
			PrunedThrough: uint64(sb.PrunedThrough),
		})
	}
	return st, nil
}

// Check compares every sandbox's state in the bucket with its log in the
// stream: no event beyond last_event_id (an append left half done), the
// first retained event after pruned_through and equal to oldest_event_id,
// the log's byte count equal to what its retained events hold (which
// reads every log), and a stored config. It returns every problem found, joined. Events at
// or below pruned_through that a prune cut short left behind are no
// problem: no reader reaches them and the next prune removes them.
func (s *Store) Check() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var errs []error
	keys, err := s.kv.ListKeysFiltered(ctx, "state.*")
	if err != nil {
		return fmt.Errorf("list states: %w", err)
	}
	for key := range keys.Keys() {
		id, _ := cutKey(key, "state.")
		kve, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // dropped meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
			continue
		}
		st, _, err := decodeState(kve.Value())
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
			continue
		}
		if err := s.checkOne(ctx, id, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) checkOne(ctx context.Context, id string, st *sandbox.State) error {
	m := st.Marks()
	if _, err := s.kv.Get(ctx, configKey(id)); err != nil {
		return fmt.Errorf("sandbox %s: config: %w", id, err)
	}
	tip, err := s.lastSeq(ctx, s.subject(id), 0)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if tip > uint64(m.LastEventID) {
		return fmt.Errorf("sandbox %s: event %d in the stream beyond last_event_id %d", id, tip, m.LastEventID)
	}
	oldest, err := s.firstAfter(ctx, id, uint64(m.PrunedThrough), uint64(m.LastEventID))
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if oldest != uint64(m.OldestEventID) {
		return fmt.Errorf("sandbox %s: first retained event is %d, oldest_event_id says %d", id, oldest, m.OldestEventID)
	}
	held, err := s.rangeBytes(ctx, id, uint64(m.PrunedThrough)+1, uint64(m.LastEventID))
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	// A state without the count was written before it existed: its next
	// load counts it.
	if held != st.LogBytes && (st.LogBytes != 0 || m.OldestEventID == 0) {
		return fmt.Errorf("sandbox %s: the state counts %d bytes of events, the log holds %d", id, st.LogBytes, held)
	}
	return nil
}

// markKey holds retention's compaction mark of a sandbox (retention.Marker):
// 8 bytes, big-endian; every turn completed at or before it is compacted.
// The mark describes the shared log, so a node that takes a sandbox over
// resumes where the last one left off.
func markKey(id string) string { return "mark." + id }

// CompactionMark returns the compaction mark of sandbox id, 0 when none was
// set, so that the loop's first pass after a start reads its log from
// there instead of from its head.
func (s *Store) CompactionMark(id string) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	if !validID(id) {
		return 0, notFound(id)
	}
	ctx, cancel := s.opCtx(context.Background())
	defer cancel()
	kve, err := s.kv.Get(ctx, markKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("compaction mark of %s: %w", id, err)
	}
	if v := kve.Value(); len(v) == 8 {
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, nil
}

// SetCompactionMarks sets the compaction marks of several sandboxes,
// skipping those gone: a mark left for a dropped sandbox would outlive it.
func (s *Store) SetCompactionMarks(ctx context.Context, marks map[string]uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	for id, mark := range marks {
		if _, err := s.lookup(ctx, id); err != nil {
			if sandbox.IsType(err, sandbox.ENotFound) {
				continue
			}
			return err
		}
		if _, err := s.kv.Put(ctx, markKey(id), binary.BigEndian.AppendUint64(nil, mark)); err != nil {
			return fmt.Errorf("compaction mark of %s: %w", id, err)
		}
	}
	return nil
}
