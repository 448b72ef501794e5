package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// maxConflicts bounds how often one write starts again after another
// process changed the state or the log under it. Each retry makes progress
// for someone, so hitting the bound means a hot sandbox written from many
// processes, which the coordinator's ownership rules out.
const maxConflicts = 16

// backoff waits a little before a write starts again after a conflict, a
// random time that grows with the attempts, so that two processes writing
// one sandbox fall out of step instead of colliding again.
func backoff(ctx context.Context, attempt int) {
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<attempt, 50*time.Millisecond))))
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
// its state; see coordinator.Store. The events are published together and
// acknowledged by JetStream (stored and, with sync_interval always, synced)
// before the state is updated, and readers see them only once it is. Each
// event must be of a durable type; an empty SandboxID is set to id and a
// zero TS to the current time. The events must not be touched by another
// goroutine until Append returns, when each has its ID.
//
// A context canceled before the first publish fails the append with
// nothing written; after it, the append runs to the end (bounded by
// Options.Timeout), because a caller who gave up must not leave events
// behind that no state accounts for.
func (s *Store) Append(ctx context.Context, id string, events []*sandbox.Event, mutate func(*sandbox.State) error) error {
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
		if errors.Is(err, errFenced) && attempt < maxConflicts {
			// Another process left events in the stream that no state
			// accounts for: fold them in, then run this append again.
			s.log.Warn("natsstore: events beyond the state; folding them in before appending", "sandbox_id", id)
			s.invalidate(e)
			backoff(ctx, attempt)
			continue
		}
		if err != nil {
			return err
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

// errFenced is a publish refused because the subject's last message was
// not the one the state accounts for.
var errFenced = errors.New("the log has events beyond the state")

func (s *Store) appendOnce(ctx context.Context, e *entry, batch []prepared, mutate func(*sandbox.State) error) ([]uint64, error) {
	id := e.id
	st, rev, tip, err := s.loadForWrite(ctx, e)
	if err != nil {
		return nil, err
	}
	work := st.Clone()
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
	seqs, err := s.publish(wctx, id, batch, tip)
	if err != nil {
		s.invalidate(e)
		return nil, err
	}
	if len(seqs) > 0 {
		tip = seqs[len(seqs)-1]
	}
	for i, p := range batch {
		ch.add(work.Apply(&sandbox.Event{
			ID: seqs[i], Type: p.ev.Type, TS: foldTime(p.ev.TS),
			SandboxID: id, TurnID: p.ev.TurnID, Data: p.folded,
		}))
	}
	for attempt := 1; ; attempt++ {
		newRev, err := s.commit(wctx, id, work, rev, ch)
		if err == nil {
			s.observe(id, work.Sandbox, work, newRev)
			s.setTip(e, newRev, tip)
			return seqs, nil
		}
		if !isConflict(err) || attempt == maxConflicts {
			s.invalidate(e)
			return nil, fmt.Errorf("append to %s: %w", id, err)
		}
		// Another process changed the state (not the log) since it was
		// read: fold again on top of what it wrote.
		s.log.Warn("natsstore: sandbox state changed by another process; folding again", "sandbox_id", id, "attempt", attempt)
		backoff(wctx, attempt)
		if work, rev, tip, ch, err = s.refold(wctx, e, mutate, seqs); err != nil {
			s.invalidate(e)
			return nil, err
		}
	}
}

// runMutate runs a caller's mutate on the working state. A panic fails this
// append alone. The watermarks belong to the log, not to the caller.
func runMutate(log *slog.Logger, mutate func(*sandbox.State) error, st *sandbox.State) (err error) {
	marks := st.Marks()
	defer func() {
		if r := recover(); r != nil {
			log.Error("append: mutate panicked", "sandbox_id", st.Sandbox.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("append to %s: mutate panicked: %v", st.Sandbox.ID, r)
		}
		st.Sandbox.LastEventID, st.Sandbox.OldestEventID, st.Sandbox.PrunedThrough = marks.LastEventID, marks.OldestEventID, marks.PrunedThrough
	}()
	return mutate(st)
}

// publish sends the events of one append without waiting between them and
// then awaits every acknowledgement, so an append costs one round trip
// however many events it carries. The first event expects tip as the
// subject's last sequence: if another process published events that no
// state accounts for, it is refused and the append fails with errFenced.
// If any event is refused, those already stored are deleted again (no
// state accounts for them yet, so no reader has seen them).
func (s *Store) publish(ctx context.Context, id string, batch []prepared, tip uint64) ([]uint64, error) {
	seqs := make([]uint64, len(batch))
	if len(batch) == 0 {
		return seqs, nil
	}
	subject := s.subject(id)
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	var errs []error
	for i, p := range batch {
		// No retries: a retried message could land after the ones behind it.
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(s.streamName),
			jetstream.WithRetryAttempts(0), jetstream.WithStallWait(s.timeout)}
		if i == 0 {
			opts = append(opts, jetstream.WithExpectLastSequencePerSubject(tip))
		}
		f, err := s.js.PublishAsync(subject, p.body, opts...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		futures = append(futures, f)
	}
	fenced := false
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			fenced = fenced || i == 0 && isWrongLastSeq(err)
			errs = append(errs, err)
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("no acknowledgement: %w", ctx.Err()))
		}
	}
	for i := 1; i < len(seqs) && len(errs) == 0; i++ {
		if seqs[i] <= seqs[i-1] {
			errs = append(errs, fmt.Errorf("stored out of order: sequence %d after %d", seqs[i], seqs[i-1]))
		}
	}
	if len(errs) == 0 {
		return seqs, nil
	}
	err := fmt.Errorf("append to %s: publish: %w", id, errors.Join(errs...))
	if fenced {
		err = fmt.Errorf("append to %s: %w", id, errFenced)
	}
	if rerr := s.deleteSeqs(ctx, seqs); rerr != nil {
		// They stay beyond the state; the next load folds them in.
		s.log.Error("natsstore: cannot delete the events of a failed append", "sandbox_id", id, "err", rerr)
	}
	return nil, err
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (s *Store) deleteSeqs(ctx context.Context, seqs []uint64) error {
	var errs []error
	for _, seq := range seqs {
		if seq == 0 {
			continue
		}
		if err := s.stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			errs = append(errs, fmt.Errorf("delete %d: %w", seq, err))
		}
	}
	return errors.Join(errs...)
}

// commit stores the turns and approvals a write changed, then the state,
// checked against the revision it was read at. The resources go first: if
// the process dies in between, the next load folds the same events again
// and writes the same resources.
func (s *Store) commit(ctx context.Context, id string, st *sandbox.State, rev uint64, ch changes) (uint64, error) {
	for tid, t := range ch.turns {
		if err := s.putJSON(ctx, turnKey(id, tid), t); err != nil {
			return 0, err
		}
	}
	for aid, a := range ch.approvals {
		if err := s.putJSON(ctx, approvalKey(id, aid), a); err != nil {
			return 0, err
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("encode state: %w", err)
	}
	return s.kv.Update(ctx, stateKey(id), data, rev)
}

func (s *Store) putJSON(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if _, err := s.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// loadForWrite returns the state to write on, its revision and the
// subject's last message. The cached state serves while it is the latest
// this process knows of; otherwise it is read from the bucket and repaired:
// events that an interrupted append left in the stream beyond the state are
// folded in and stored before anything else is written. The caller holds
// e.wmu.
func (s *Store) loadForWrite(ctx context.Context, e *entry) (*sandbox.State, uint64, uint64, error) {
	s.mu.Lock()
	gone, st, rev, tip, tipOK := e.gone, e.state, e.rev, e.tip, e.tipOK
	s.mu.Unlock()
	if gone {
		return nil, 0, 0, notFound(e.id)
	}
	if st != nil && tipOK {
		return st, rev, tip, nil
	}
	for attempt := 1; ; attempt++ {
		_, st, rev, err := s.fetch(ctx, e.id)
		if err != nil {
			return nil, 0, 0, err
		}
		tip, err := s.lastSeq(ctx, s.subject(e.id), 0)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("sandbox %s: %w", e.id, err)
		}
		if tip <= uint64(st.Sandbox.LastEventID) {
			s.setTip(e, rev, tip)
			return st, rev, tip, nil
		}
		work := st.Clone()
		var ch changes
		n, err := s.foldRange(ctx, e.id, work, uint64(st.Sandbox.LastEventID)+1, tip, nil, &ch)
		if err != nil {
			return nil, 0, 0, err
		}
		newRev, err := s.commit(ctx, e.id, work, rev, ch)
		if isConflict(err) && attempt < maxConflicts {
			backoff(ctx, attempt)
			continue
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("sandbox %s: store repaired state: %w", e.id, err)
		}
		s.log.Warn("natsstore: folded events that an interrupted append left beyond the state",
			"sandbox_id", e.id, "events", n, "through", tip)
		s.observe(e.id, work.Sandbox, work, newRev)
		s.setTip(e, newRev, tip)
		return work, newRev, tip, nil
	}
}

// foldRange folds the events of sandbox id with ids in [from, to] from the
// stream into st, in stream order, and returns how many it folded. before,
// when not nil, runs ahead of each event and may stop the fold.
func (s *Store) foldRange(ctx context.Context, id string, st *sandbox.State, from, to uint64, before func(seq uint64) error, ch *changes) (int, error) {
	n := 0
	for from <= to {
		msgs, err := s.getBatch(ctx, s.subject(id), from, 256, 0)
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
// fails now takes the append's events back out of the stream.
func (s *Store) refold(ctx context.Context, e *entry, mutate func(*sandbox.State) error, seqs []uint64) (
	work *sandbox.State, rev, tip uint64, ch changes, err error) {
	_, st, rev, err := s.fetch(ctx, e.id)
	if err != nil {
		return nil, 0, 0, ch, err
	}
	if tip, err = s.lastSeq(ctx, s.subject(e.id), 0); err != nil {
		return nil, 0, 0, ch, err
	}
	work = st.Clone()
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
			return nil, 0, 0, ch, errors.Join(mutateErr, fmt.Errorf("append to %s: take back its events: %w", e.id, derr))
		}
		return nil, 0, 0, ch, mutateErr
	}
	if err != nil {
		return nil, 0, 0, ch, err
	}
	if !mutated {
		if apply(); mutateErr != nil {
			return nil, 0, 0, ch, mutateErr
		}
	}
	return work, rev, tip, ch, nil
}
