package natsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// How the events of one append go on the wire. Every append's first event
// expects the last sequence of the sandbox's log and fence subject together
// to be what the writer saw (see fence.go); the others must not land if
// that one was refused, nor after a fence put up in the middle of them.
// Two ways meet that, and Open picks one for the stream:
//
//   - On a single server, the events are pipelined: all published at once,
//     then every acknowledgement awaited, so an append costs one round trip
//     however many events it carries. The server checks each message when
//     it stores it, in order, so every event after the first expects the
//     fence subject to be unchanged. Any refusal deletes those already
//     stored.
//   - On a replicated stream, a leader checks expectations before it
//     proposes a message and refuses a second one on a subject whose first
//     is still being replicated, so pipelined expectations refuse each
//     other. The events go as one atomic batch instead (nats-server 2.12):
//     staged, checked and stored together, in consecutive sequences, with
//     one acknowledgement; nothing is stored when it is refused. A batch
//     holds at most maxAtomicBatch events; a longer append is several
//     batches in a row, each expecting the last of the one before.
//
// On a single server an atomic batch is staged in a file store of its own
// (figures in doc.go), which is why it is not used there.

// maxAtomicBatch is the server's default limit on the messages of one
// atomic batch (jetstream.limits.batch.max_msgs).
const maxAtomicBatch = 1000

// Error codes of the JetStream API that publishing tells apart.
const (
	codeWrongLastSeq         = 10071 // an expected last sequence did not match
	codeWrongLastSeqConstant = 10164 // likewise, or one on the subject is still being replicated
	codeSeqNotFound          = 10043 // a message to delete is not there
)

func apiCode(err error) int {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return int(apiErr.ErrorCode)
	}
	return 0
}

// isWrongLastSeq reports whether a publish was refused for an expected
// last sequence: the log moved, or a takeover fenced it.
func isWrongLastSeq(err error) bool {
	code := apiCode(err)
	return code == codeWrongLastSeq || code == codeWrongLastSeqConstant
}

// definite reports whether trying a write again cannot change its outcome:
// the server answered that it did not store it, for a reason that stays
// (too large, no such stream), or this process closed its connection.
// Anything else (no answer in time, a connection being re-established, no
// leader, an atomic batch the server had no room for) may or may not have
// been stored, or is worth trying again.
func definite(err error) bool {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && !isWrongLastSeq(err) &&
		apiErr.ErrorCode != codeBatchIncomplete && apiErr.ErrorCode != codeBatchInflight
}

const (
	codeBatchIncomplete = 10176 // the server dropped a batch (a message lost, a limit, a timeout)
	codeBatchInflight   = 10210 // too many atomic batches in flight on the stream
)

// attemptCtx bounds one request of a write that is tried again when it
// gets no answer, so that a server which went away mid-request (a cluster
// electing a new leader) leaves time for another attempt.
func (s *Store) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(s.timeout/4, 100*time.Millisecond))
}

// publishSure publishes the events of an append as v saw the log, and
// returns their sequences. A publish refused because the log moved fails
// with errMoved; the caller reads the log again. A publish that got no
// answer (a server that went away, a leader being elected) is settled by
// reading the log back: the events found there after what v saw are
// taken as stored (no other process publishes there past a fence of this
// one's, and a process holding no fence only where its state is current),
// the rest are sent again. A refusal after an attempt without answer is
// settled the same way, since that attempt may be what moved the log.
//
// After an attempt without answer, the first event of what is left goes
// alone, and the others only once it is stored: on a single server only
// the first event's expectation guards the log, and the others of an
// attempt whose first was refused because an earlier one landed would
// land a second time where no answer comes to take them back.
func (s *Store) publishSure(ctx context.Context, id string, batch []prepared, v view, epoch uint64) ([]uint64, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	seqs := make([]uint64, 0, len(batch))
	last, fence := v.last(), v.fence
	unsure := false
	for attempt := 1; ; attempt++ {
		end := len(batch)
		if unsure {
			end = len(seqs) + 1
		}
		actx, cancel := s.attemptCtx(ctx)
		got, err := s.hooks.Load().publishing(func() ([]uint64, error) { return s.publish(actx, id, batch[len(seqs):end], last, fence) })
		cancel()
		if err == nil {
			if seqs = append(seqs, got...); len(seqs) == len(batch) {
				return seqs, nil
			}
			last = got[len(got)-1]
			continue
		}
		switch {
		case isWrongLastSeq(err) && !unsure:
			return nil, fmt.Errorf("append to %s: %w", id, errMoved)
		case definite(err):
			return nil, fmt.Errorf("append to %s: publish: %w", id, err)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("append to %s: publish: %w (%w)", id, err, ctx.Err())
		}
		unsure = true
		s.log.Warn("natsstore: a publish got no answer; reading the log back", "sandbox_id", id, "err", err)
		Backoff(ctx, attempt)
		landed, err := s.settle(ctx, id, batch[len(seqs):], last, epoch)
		if err != nil {
			return nil, err
		}
		seqs = append(seqs, landed...)
		if len(seqs) == len(batch) {
			return seqs, nil
		}
		if len(landed) > 0 {
			last = landed[len(landed)-1]
		}
		if err := ctx.Err(); err != nil {
			// Given up while the log was read back: nothing more is sent.
			return nil, fmt.Errorf("append to %s: publish: its outcome is unknown (%w)", id, context.Cause(ctx))
		}
	}
}

// settle reads what the log of sandbox id holds after last and returns
// the sequences of the leading events of batch found there, in order.
// Anything else there (events of another writer, ours out of order) fails
// the append, as does a fence of another node.
func (s *Store) settle(ctx context.Context, id string, batch []prepared, last, epoch uint64) ([]uint64, error) {
	actx, cancel := s.attemptCtx(ctx)
	defer cancel()
	tip, fence, err := s.lastBoth(actx, id)
	if err != nil {
		return nil, nil // not known yet: the next attempt is refused or stores them
	}
	if epoch != 0 && fence != 0 && fence != epoch {
		return nil, &FencedError{SandboxID: id, Epoch: epoch, Holder: fence}
	}
	if tip <= last {
		return nil, nil
	}
	msgs, err := s.getBatch(actx, s.subject(id), last+1, len(batch)+1, 0, tip)
	if err != nil {
		return nil, nil
	}
	var landed []uint64
	for i, msg := range msgs {
		seq, err := msgSeq(msg)
		if err != nil {
			return nil, err
		}
		if i >= len(batch) || !bytes.Equal(msg.Data, batch[i].body) {
			return nil, fmt.Errorf("append to %s: event %d after %d is not this append's; its publish got no answer and its outcome is unknown", id, seq, last)
		}
		landed = append(landed, seq)
	}
	return landed, nil
}

// unsureAppend is an append given up with its outcome unknown (its publish
// got no answer, or was given up writeGrace into an outage, or its events
// were stored and its state was not): its events may be in the log, right
// after last, where only they can land. The coordinator keeps such a write
// and makes it again, the very same events; recognise finds them there so
// that they are not stored twice (two turn.completed for one turn).
type unsureAppend struct {
	last   uint64   // the last sequence of the log and fence subject it expected
	bodies [][]byte // its events as stored, in order
}

// unsure records, on e, that the append of batch, published after last,
// has an unknown outcome. One that recognised events of an earlier one
// (known) keeps that one's record, which covers them and, after them, the
// rest it published. The caller holds e.wmu.
func (s *Store) unsure(e *entry, last uint64, batch []prepared, known []uint64) {
	if len(batch) == 0 || len(known) > 0 {
		return
	}
	u := &unsureAppend{last: last, bodies: make([][]byte, len(batch))}
	for i, p := range batch {
		u.bodies[i] = p.body
	}
	e.unsure = u
	s.log.Warn("natsstore: an append's outcome is unknown; the same events appended again are recognised in the log",
		"sandbox_id", e.id, "events", len(batch), "after", last)
}

// recognise returns the sequences of the leading events of batch that the
// append recorded on e as unsure left in the log, as v saw it, and how
// many of that append's events the log holds (landed). Events are the same
// when their stored bodies are, which carry their type, data and time
// stamp: a batch that is not the unsure one again is recognised nowhere.
// What it returns is folded in v's state already (loadForWrite folds what
// the log holds beyond the state). The caller holds e.wmu.
func (s *Store) recognise(ctx context.Context, e *entry, v view, batch []prepared) (known []uint64, landed int, err error) {
	u := e.unsure
	if u == nil || len(batch) == 0 || v.tip <= u.last {
		return nil, 0, nil
	}
	msgs, err := s.getBatch(ctx, s.subject(e.id), u.last+1, len(u.bodies), 0, v.tip)
	if err != nil {
		return nil, 0, fmt.Errorf("append to %s: read back an append whose outcome was unknown: %w", e.id, err)
	}
	same := true // batch so far is the unsure append again
	for i, msg := range msgs {
		seq, err := msgSeq(msg)
		if err != nil {
			return nil, 0, err
		}
		if seq > v.tip || !bytes.Equal(msg.Data, u.bodies[i]) {
			break
		}
		if seq > uint64(v.st.Sandbox.LastEventID) {
			// Not folded into the state this append writes on: read it
			// again, which folds it.
			return nil, 0, fmt.Errorf("append to %s: %w", e.id, errMoved)
		}
		landed++
		if same = same && i < len(batch) && bytes.Equal(batch[i].body, msg.Data); same {
			known = append(known, seq)
		}
	}
	if landed == 0 && len(msgs) > 0 {
		// Another write follows last: the unsure one's first event, which
		// expected last, never landed and never will.
		e.unsure = nil
	}
	if len(known) < min(landed, len(batch)) {
		return nil, landed, nil // another batch, or the same one only in part
	}
	if len(known) > 0 {
		s.log.Info("natsstore: events of an append whose outcome was unknown are in the log; not publishing them again",
			"sandbox_id", e.id, "events", len(known), "from", known[0])
	}
	return known, landed, nil
}

// settled updates the unsure append recorded on e after an append went
// through that recognised known of its events, out of landed found in the
// log, and published more (published) or not. The caller holds e.wmu.
func settled(e *entry, known []uint64, landed int, published bool) {
	switch {
	case e.unsure == nil:
	case len(known) > 0 && landed > len(known):
		// The append was a first part of the unsure one: the rest may be
		// appended again on its own.
		e.unsure = &unsureAppend{last: known[len(known)-1], bodies: e.unsure.bodies[len(known):]}
	case len(known) > 0, landed == 0 && published:
		// Recognised, or nothing of it landed and the log has moved past
		// what its first event expected.
		e.unsure = nil
	}
}

// publishPipelined is the single-server way (see the top of this file).
func (s *Store) publishPipelined(ctx context.Context, id string, batch []prepared, last, fence uint64) ([]uint64, error) {
	seqs := make([]uint64, len(batch))
	subject := s.subject(id)
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	var errs []error
	for i, p := range batch {
		// No retries: a retried message could land after the ones behind it.
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(s.streamName),
			jetstream.WithRetryAttempts(0), jetstream.WithStallWait(s.timeout)}
		if i == 0 {
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(last, s.bothSubjects(id)))
		} else {
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(fence, s.fenceSubject(id)))
		}
		f, err := s.js.PublishAsync(subject, p.body, opts...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		futures = append(futures, f)
		s.hooks.Load().sent(id, i)
	}
	refused, unanswered := false, false
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			refused = refused || isWrongLastSeq(err)
			errs = append(errs, err)
		case <-ctx.Done():
			unanswered = true
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
	err := errors.Join(errs...)
	if refused {
		err = errs[0]
		for _, e := range errs {
			if isWrongLastSeq(e) {
				err = e
				break
			}
		}
	}
	if unanswered && !refused {
		// What got no answer may be stored: the caller reads the log back,
		// and what landed stays for it to find.
		return nil, err
	}
	s.takeBack(ctx, id, seqs, fence)
	return nil, err
}

// takeBack deletes the stored events of an append that failed, unless a
// fence went up since the append read the log: then they came before it,
// are the log's, and its holder folds them (it may have already).
func (s *Store) takeBack(ctx context.Context, id string, seqs []uint64, fence uint64) {
	if !slices.ContainsFunc(seqs, func(seq uint64) bool { return seq != 0 }) {
		return
	}
	ctx, cancel := s.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	if _, now, err := s.lastBoth(ctx, id); err != nil || now != fence {
		// Unknown or fenced: they stay beyond the state, and whoever loads
		// it next folds them in.
		return
	}
	if err := s.deleteSeqs(ctx, seqs); err != nil {
		// They stay beyond the state; the next load folds them in.
		s.log.Error("natsstore: cannot delete the events of a failed append", "sandbox_id", id, "err", err)
	}
}

// publishAtomic is the replicated-stream way (see the top of this file).
func (s *Store) publishAtomic(ctx context.Context, id string, batch []prepared, last, fence uint64) ([]uint64, error) {
	seqs := make([]uint64, 0, len(batch))
	for len(seqs) < len(batch) {
		chunk := batch[len(seqs):min(len(seqs)+maxAtomicBatch, len(batch))]
		got, err := s.publishBatch(ctx, id, chunk, last)
		if err != nil {
			if definite(err) || isWrongLastSeq(err) {
				s.takeBack(ctx, id, seqs, fence)
			}
			return nil, err
		}
		seqs = append(seqs, got...)
		last = got[len(got)-1]
	}
	return seqs, nil
}

// publishBatch publishes chunk as one atomic batch whose first message
// expects last. Only the commit asks for an answer: the server answers it
// for the whole batch, with the sequence of its last message, and stores a
// batch in consecutive sequences.
func (s *Store) publishBatch(ctx context.Context, id string, chunk []prepared, last uint64) ([]uint64, error) {
	batchID := sandbox.NewID("b")
	subject := s.subject(id)
	for i, p := range chunk {
		m := &nats.Msg{Subject: subject, Data: p.body, Header: nats.Header{}}
		m.Header.Set(jetstream.ExpectedStreamHeader, s.streamName)
		m.Header.Set("Nats-Batch-Id", batchID)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, s.bothSubjects(id))
		}
		if i < len(chunk)-1 {
			if err := s.nc.PublishMsg(m); err != nil {
				return nil, err
			}
			s.hooks.Load().sent(id, i)
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
		if err != nil {
			return nil, err
		}
		first := ack.Sequence - uint64(len(chunk)-1)
		seqs := make([]uint64, len(chunk))
		for j := range seqs {
			seqs[j] = first + uint64(j)
		}
		return seqs, nil
	}
	return nil, nil
}

// deleteSeqs deletes messages of a failed append; 0s are skipped.
func (s *Store) deleteSeqs(ctx context.Context, seqs []uint64) error {
	var errs []error
	for _, seq := range seqs {
		if seq == 0 {
			continue
		}
		if _, err := s.deleteMsg(ctx, seq); err != nil {
			errs = append(errs, fmt.Errorf("delete %d: %w", seq, err))
		}
	}
	return errors.Join(errs...)
}

// deleteMsg deletes message seq from the stream and reports whether it was
// there. One that is not is no error: another node's retention pass (or
// this one's earlier attempt) removed it, which is what was asked. The
// client library reports that case only in the text of its error, so the
// request is made here.
func (s *Store) deleteMsg(ctx context.Context, seq uint64) (bool, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	if err != nil {
		return false, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+s.streamName, req)
	if err != nil {
		return false, err
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return false, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == codeSeqNotFound:
		return false, nil
	case resp.Error != nil:
		return false, resp.Error
	case !resp.Success:
		return false, errors.New("not deleted")
	}
	return true, nil
}
