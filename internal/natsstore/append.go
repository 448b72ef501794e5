package natsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// maxConflicts bounds how often one write starts again after another
// process changed the state or the log under it. Each retry makes progress
// for someone, so hitting the bound means a hot sandbox written from many
// processes, which the coordinator's ownership rules out.
const maxConflicts = 16

// Backoff waits a little before a write starts again after a conflict, a
// random time that grows with the attempts, so that two processes writing
// one sandbox fall out of step instead of colliding again.
func Backoff(ctx context.Context, attempt int) {
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(attempt, 8), 50*time.Millisecond))))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// prepared is one event of an append, encoded before anything is sent.
type prepared struct {
	ev     *sandbox.Event
	body   []byte // the envelope with a null id, as stored
	folded any    // the data decoded back, exactly what a reader folds
}

func (s *Store) prepare(id string, events []*sandbox.Event) ([]prepared, error) {
	batch := make([]prepared, len(events))
	for i, ev := range events {
		data, err := sandbox.PrepareAppend(id, i, ev, s.now)
		if err != nil {
			return nil, err
		}
		folded, err := sandbox.DecodeData(ev.Type, data)
		if err != nil {
			return nil, fmt.Errorf("append to %s: %w", id, err)
		}
		if err := checkResourceIDs(id, ev, folded); err != nil {
			return nil, err
		}
		batch[i] = prepared{ev: ev, body: encodeEvent(ev, id, data), folded: folded}
	}
	return batch, nil
}

// checkResourceIDs refuses, before anything is published, an event whose
// fold would create a turn or approval that cannot be stored under its id.
func checkResourceIDs(id string, ev *sandbox.Event, folded any) error {
	var rid string
	switch d := folded.(type) {
	case *sandbox.TurnStarted:
		rid = ev.TurnID
	case *sandbox.ApprovalRequested:
		rid = d.ApprovalID
	case *sandbox.ApprovalResolved:
		rid = d.ApprovalID
	default:
		return nil
	}
	if !validID(rid) {
		return sandbox.Errorf(sandbox.EInvalidRequest, "append to %s: %s event with invalid resource id %q", id, ev.Type, rid)
	}
	return nil
}

// changes are the turn and approval resources a write changed, stored
// under their own keys so they stay addressable after the state moves on.
type changes struct {
	turns     map[string]*sandbox.Turn
	approvals map[string]*sandbox.Approval
}

func (c *changes) add(t *sandbox.Turn, a *sandbox.Approval) {
	if t != nil {
		if c.turns == nil {
			c.turns = make(map[string]*sandbox.Turn)
		}
		c.turns[t.ID] = t
	}
	if a != nil {
		if c.approvals == nil {
			c.approvals = make(map[string]*sandbox.Approval)
		}
		c.approvals[a.ID] = a
	}
}

// addMutated keeps a turn that exists before its turn.started (queued, in
// the state only) addressable; the state's turn, which mutate may also have
// changed, wins over it.
func (c *changes) addMutated(st *sandbox.State) {
	if t := st.Sandbox.CurrentTurn; t != nil {
		c.add(t.Clone(), nil)
	}
	if st.Turn != nil {
		c.add(st.Turn, nil)
	}
}

// Append makes events durable in the log of sandbox id and folds them into
// its state; see sandbox.Store. The events are published together and
// acknowledged by JetStream (stored and, with sync_interval always, synced)
// before the state is updated, and readers see them only once it is. Each
// event must be of a durable type; an empty SandboxID is set to id and a
// zero TS to the current time. The events must not be touched by another
// goroutine until Append returns, when each has its ID.
//
// A process that holds the sandbox's log (see fence.go) appends only while
// it does: an append it may no longer make fails with a *FencedError,
// which matches sandbox.ErrFenced, and writes nothing.
//
// A context canceled before the first publish fails the append with
// nothing written; after it, the append runs to the end (bounded by
// Options.Timeout), because a caller who gave up must not leave events
// behind that no state accounts for.
//
// While NATS is known unreachable an append fails at once, with nothing
// written, as unavailable; so does one in flight that has not published
// yet when the outage is found, and one whose requests got no answer (or
// were given up writeGrace after it), whose outcome is unknown. The same
// events appended again (the coordinator makes a refused write again, as
// it was) are recognised where they landed: they get the ids they have,
// are neither published nor folded twice, and mutate runs once more on a
// state that holds them (see unsureAppend).
func (s *Store) Append(ctx context.Context, id string, events []*sandbox.Event, mutate func(*sandbox.State) error) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if !validID(id) {
		return notFound(id)
	}
	batch, err := s.prepare(id, events)
	if err != nil {
		return err
	}
	if err := s.refuse(true); err != nil {
		return err
	}
	// What comes before the first publish is given up when NATS is found
	// unreachable; from the publish on, a little later (see reach.go).
	ctx, done := s.begin(ctx, true)
	defer func() { err = done(err) }()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if len(batch) == 0 && mutate == nil {
		return ctx.Err()
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		seqs, err := s.appendOnce(ctx, e, batch, mutate)
		if errors.Is(err, errMoved) && attempt < maxConflicts {
			// Another process left events in the stream that no state
			// accounts for, or put up a fence: look again, and fold them
			// in (or give up the log) before appending.
			s.log.Warn("natsstore: the log moved under this append; reading it again", "sandbox_id", id)
			s.invalidate(e)
			Backoff(ctx, attempt)
			continue
		}
		if err != nil {
			return s.lost(err)
		}
		for i, p := range batch {
			p.ev.ID = seqs[i]
		}
		if s.observer != nil && len(batch) > 0 {
			s.observer.Commit(len(batch), time.Since(start), 0)
		}
		return nil
	}
}

// errMoved is a publish refused because the last message of the log or
// the fence subject was not the one the state accounts for.
var errMoved = errors.New("the log moved under this append")

// view is a state to write on, with the last messages of the sandbox's log
// and fence subjects that were confirmed with it.
type view struct {
	stored
	tip, fence uint64
}

// last is what the first event of an append expects as the last sequence
// of the log and the fence subject together.
func (v view) last() uint64 { return max(v.tip, v.fence) }

func (s *Store) appendOnce(ctx context.Context, e *entry, batch []prepared, mutate func(*sandbox.State) error) ([]uint64, error) {
	id := e.id
	epoch, err := s.holdOf(id)
	if err != nil {
		return nil, err
	}
	check := func(v view) error { return s.checkHold(id, epoch, v) }
	v, err := s.loadForWrite(ctx, e, check)
	if err != nil {
		return nil, err
	}
	if err := check(v); err != nil {
		return nil, err
	}
	// The leading events that an earlier try of this append left in the
	// log are in v's state already: they keep their ids and are not
	// published again.
	known, landed, err := s.recognise(ctx, e, v, batch)
	if err != nil {
		return nil, err
	}
	work := v.st.Clone()
	var ch changes
	if mutate != nil {
		if err := runMutate(s.log, mutate, work); err != nil {
			return nil, err
		}
		if t := work.Sandbox.CurrentTurn; t != nil && !validID(t.ID) {
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "append to %s: current turn with invalid id %q", id, t.ID)
		}
		ch.addMutated(work)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	wctx, cut := s.cutOffWrites(wctx)
	defer cut()
	rest := batch[len(known):]
	sentAt := v.last()
	published, err := s.publishSure(wctx, id, rest, v, epoch)
	if err != nil {
		s.invalidate(e)
		if !errors.Is(err, errMoved) {
			s.unsure(e, sentAt, batch, known)
		}
		return nil, err
	}
	tip := v.tip
	if len(published) > 0 {
		tip = published[len(published)-1]
	}
	for i, p := range rest {
		work.Appended(p.ev.Type, servedLen(published[i], p.body))
		ch.add(work.Apply(&sandbox.Event{
			ID: published[i], Type: p.ev.Type, TS: foldTime(p.ev.TS),
			SandboxID: id, TurnID: p.ev.TurnID, Data: p.folded,
		}))
	}
	s.hooks.Load().committing(id)
	for attempt := 1; ; attempt++ {
		newRev, err := s.commit(wctx, id, work, v.owner, v.rev, ch)
		if err == nil {
			s.observe(id, work.Sandbox, work, v.owner, newRev)
			s.setTip(e, newRev, tip, v.fence)
			settled(e, known, landed, len(published) > 0)
			return append(known, published...), nil
		}
		if !isConflict(err) || attempt == maxConflicts {
			// The events are stored and no state accounts for them yet:
			// the next load folds them in, and the same events appended
			// again are recognised there.
			s.invalidate(e)
			s.unsure(e, sentAt, batch, known)
			return nil, fmt.Errorf("append to %s: %w", id, err)
		}
		// Another process changed the state (not the log) since it was
		// read: fold again on top of what it wrote, unless that was a
		// takeover.
		s.log.Warn("natsstore: sandbox state changed by another process; folding again", "sandbox_id", id, "attempt", attempt)
		Backoff(wctx, attempt)
		if work, v, ch, err = s.refold(wctx, e, mutate, published, epoch); err != nil {
			s.invalidate(e)
			s.unsure(e, sentAt, batch, known)
			return nil, err
		}
		tip = max(tip, v.tip)
	}
}

// runMutate runs a caller's mutate on the working state. A panic fails this
// append alone. The watermarks and the log's byte counts belong to the log,
// not to the caller.
func runMutate(log *slog.Logger, mutate func(*sandbox.State) error, st *sandbox.State) (err error) {
	marks := st.Marks()
	logBytes, turnBytes := st.LogBytes, st.TurnBytes
	defer func() {
		if r := recover(); r != nil {
			log.Error("append: mutate panicked", "sandbox_id", st.Sandbox.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("append to %s: mutate panicked: %v", st.Sandbox.ID, r)
		}
		st.Sandbox.LastEventID, st.Sandbox.OldestEventID, st.Sandbox.PrunedThrough = marks.LastEventID, marks.OldestEventID, marks.PrunedThrough
		st.LogBytes, st.TurnBytes = logBytes, turnBytes
	}()
	return mutate(st)
}

// commit stores the turns and approvals a write changed, then the state
// with owner, each on the condition that the state key is still at the
// revision rev it was read at: a process whose read is out of date (a
// node that lost the sandbox while it was paused) changes nothing. The
// resources go first: if the process dies in between, the next load folds
// the same events again and writes the same resources.
func (s *Store) commit(ctx context.Context, id string, st *sandbox.State, owner, rev uint64, ch changes) (uint64, error) {
	for tid, t := range ch.turns {
		if err := s.putIf(ctx, id, turnKey(id, tid), t, rev); err != nil {
			return 0, err
		}
	}
	for aid, a := range ch.approvals {
		if err := s.putIf(ctx, id, approvalKey(id, aid), a, rev); err != nil {
			return 0, err
		}
	}
	data, err := encodeState(st, owner)
	if err != nil {
		return 0, err
	}
	return s.updateState(ctx, id, data, rev)
}

// errStateMoved is a key-value write refused because the state key was no
// longer at the revision it expected.
var errStateMoved = errors.New("the sandbox state changed since it was read")

// putIf stores v under key if the state of sandbox id is at revision rev.
// A write that got no answer is sent again: it is the same value either way.
func (s *Store) putIf(ctx context.Context, id, key string, v any, rev uint64) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := s.attemptCtx(ctx)
		_, err = s.js.PublishMsg(actx, &nats.Msg{Subject: s.kvPrefix + key, Data: data},
			jetstream.WithExpectStream(s.kvStream), jetstream.WithRetryAttempts(0),
			jetstream.WithExpectLastSequenceForSubject(rev, s.kvPrefix+stateKey(id)))
		cancel()
		switch {
		case err == nil:
			return nil
		case isWrongLastSeq(err):
			return errStateMoved
		case definite(err) || ctx.Err() != nil:
			return fmt.Errorf("put %s: %w", key, err)
		}
		Backoff(ctx, attempt)
	}
}

// updateState stores the state record data of sandbox id if its key is at
// revision rev, and returns the new revision. An update that got no answer
// may have been stored: the key tells, and one still at rev is updated
// again.
func (s *Store) updateState(ctx context.Context, id string, data []byte, rev uint64) (uint64, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := s.attemptCtx(ctx)
		newRev, err := s.kv.Update(actx, stateKey(id), data, rev)
		cancel()
		if err == nil || isConflict(err) || definite(err) || ctx.Err() != nil {
			return newRev, err
		}
		Backoff(ctx, attempt)
		actx, cancel = s.attemptCtx(ctx)
		kve, gerr := s.kv.Get(actx, stateKey(id))
		cancel()
		switch {
		case gerr != nil:
		case kve.Revision() == rev:
		case bytes.Equal(kve.Value(), data):
			return kve.Revision(), nil
		default:
			return 0, errStateMoved
		}
	}
}

// loadForWrite returns the state to write on, with the last messages of
// its log and fence subject. The cached state serves while it is the
// latest this process knows of; otherwise it is read from the bucket and
// repaired: events that an interrupted append left in the stream beyond
// the state are folded in and stored before anything else is written.
// check, when not nil, may refuse the write (an append the state or the
// fence refuse) before it repairs anything. The caller holds e.wmu.
func (s *Store) loadForWrite(ctx context.Context, e *entry, check func(view) error) (view, error) {
	s.mu.Lock()
	gone, st, owner, rev, tip, fence, tipOK := e.gone, e.state, e.owner, e.rev, e.tip, e.fence, e.tipOK
	s.mu.Unlock()
	if gone {
		return view{}, notFound(e.id)
	}
	if st != nil && tipOK {
		return view{stored{st: st, owner: owner, rev: rev}, tip, fence}, nil
	}
	for attempt := 1; ; attempt++ {
		_, cur, err := s.fetch(ctx, e.id)
		if err != nil {
			return view{}, err
		}
		tip, fence, err := s.lastBoth(ctx, e.id)
		if err != nil {
			return view{}, err
		}
		v := view{cur, tip, fence}
		if check != nil {
			if err := check(v); err != nil {
				return view{}, err
			}
		}
		if tip <= uint64(cur.st.Sandbox.LastEventID) {
			s.setTip(e, cur.rev, tip, fence)
			return v, nil
		}
		work := cur.st.Clone()
		var ch changes
		n, err := s.foldRange(ctx, e.id, work, uint64(cur.st.Sandbox.LastEventID)+1, tip, nil, &ch)
		if err != nil {
			return view{}, err
		}
		newRev, err := s.commit(ctx, e.id, work, cur.owner, cur.rev, ch)
		if isConflict(err) && attempt < maxConflicts {
			Backoff(ctx, attempt)
			continue
		}
		if err != nil {
			return view{}, fmt.Errorf("sandbox %s: store repaired state: %w", e.id, err)
		}
		s.log.Warn("natsstore: folded events that an interrupted append left beyond the state",
			"sandbox_id", e.id, "events", n, "through", tip)
		s.observe(e.id, work.Sandbox, work, cur.owner, newRev)
		s.setTip(e, newRev, tip, fence)
		return view{stored{st: work, owner: cur.owner, rev: newRev}, tip, fence}, nil
	}
}

// foldRange folds the events of sandbox id with ids in [from, to] from the
// stream into st, in stream order, and returns how many it folded. before,
// when not nil, runs ahead of each event and may stop the fold.
func (s *Store) foldRange(ctx context.Context, id string, st *sandbox.State, from, to uint64, before func(seq uint64) error, ch *changes) (int, error) {
	n := 0
	for from <= to {
		msgs, err := s.getBatch(ctx, s.subject(id), from, 256, 0, to)
		if err != nil {
			return n, fmt.Errorf("sandbox %s: %w", id, err)
		}
		if len(msgs) == 0 {
			return n, nil
		}
		for _, msg := range msgs {
			seq, err := msgSeq(msg)
			if err != nil {
				return n, err
			}
			if seq > to {
				return n, nil
			}
			from = seq + 1
			if before != nil {
				if err := before(seq); err != nil {
					return n, err
				}
			}
			rec, err := recordOf(seq, msg.Data)
			if err != nil {
				return n, fmt.Errorf("sandbox %s: %w", id, err)
			}
			ev, err := rec.Decode()
			if err != nil {
				return n, fmt.Errorf("sandbox %s: event %d: %w", id, seq, err)
			}
			st.Appended(rec.Type, len(rec.JSON))
			ch.add(st.Apply(&ev))
			n++
		}
	}
	return n, nil
}

// errRolledBack stops a refold whose mutate failed at the first event of
// the append, which is then taken back.
var errRolledBack = errors.New("rolled back")

// refold rebuilds an append's state after another process changed the
// state under it: from the state that process stored, it folds the stream
// as it is, with the caller's mutate just before the append's own first
// event (or at the end, if that process already folded them). A mutate that
// fails now takes the append's events back out of the stream. If the
// change was a takeover (a newer owner, a newer fence), the append is
// refused: its events, published before the fence, are the new holder's
// to fold.
func (s *Store) refold(ctx context.Context, e *entry, mutate func(*sandbox.State) error, seqs []uint64, epoch uint64) (
	work *sandbox.State, v view, ch changes, err error) {
	_, cur, err := s.fetch(ctx, e.id)
	if err != nil {
		return nil, view{}, ch, err
	}
	tip, fence, err := s.lastBoth(ctx, e.id)
	if err != nil {
		return nil, view{}, ch, err
	}
	v = view{cur, tip, fence}
	if err := s.checkHold(e.id, epoch, v); err != nil {
		return nil, view{}, ch, err
	}
	work = cur.st.Clone()
	var first uint64
	if len(seqs) > 0 {
		first = seqs[0]
	}
	mutated := mutate == nil
	var mutateErr error
	apply := func() {
		mutated = true
		if mutateErr = runMutate(s.log, mutate, work); mutateErr == nil {
			ch.addMutated(work)
		}
	}
	before := func(seq uint64) error {
		if !mutated && seq == first {
			if apply(); mutateErr != nil {
				return errRolledBack
			}
		}
		return nil
	}
	_, err = s.foldRange(ctx, e.id, work, uint64(work.Sandbox.LastEventID)+1, tip, before, &ch)
	if errors.Is(err, errRolledBack) {
		if derr := s.deleteSeqs(ctx, seqs); derr != nil {
			return nil, view{}, ch, errors.Join(mutateErr, fmt.Errorf("append to %s: take back its events: %w", e.id, derr))
		}
		return nil, view{}, ch, mutateErr
	}
	if err != nil {
		return nil, view{}, ch, err
	}
	if !mutated {
		if apply(); mutateErr != nil {
			return nil, view{}, ch, mutateErr
		}
	}
	return work, v, ch, nil
}
