package coordinator

import (
	"context"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// A box's writes while the store refuses them.
//
// The box's memory (the translator, the turn, the approvals) must never be
// ahead of the log for good: a turn the box ended whose turn.completed the
// store refused would stay running in the log forever, and the next turn
// would start on top of it. So a write the store refuses is kept, in order,
// and every later write of the sandbox queues behind it until the store
// takes them all, retried with backoff (each box on its own timer, so the
// backoff of one sandbox never holds another). The queue stays small:
// the open turn is stopped at once (its end is what queues last), so the
// agent has nothing more to say that becomes an event, and requests that
// would write are answered 503. What is left to queue is a boot's status
// or an agent's exit, a handful of writes.

// pendingWrites are the writes of one box that wait for the store, oldest
// first, with what the retries know of the store's health.
type pendingWrites struct {
	queue   []pendingWrite
	events  int         // events in queue
	lastErr error       // the store's last refusal
	attempt int         // retries since the first refusal
	retry   *time.Timer // the next retry
}

// pendingWrite is one append the store refused, kept to be made as it was.
type pendingWrite struct {
	evs    []*sandbox.Event
	mutate func(*sandbox.State) error
}

// waiting reports whether a write waits: every later one queues behind it.
func (p *pendingWrites) waiting() bool { return len(p.queue) > 0 }

// err is what a request that would write is answered while writes wait.
func (p *pendingWrites) err() error { return unavailable(p.lastErr) }

// refused records the store's refusal and arms the next retry, later with
// each attempt.
func (p *pendingWrites) refused(err error, backoff time.Duration) {
	p.lastErr = err
	p.retry.Stop()
	p.retry.Reset(backoff)
	p.attempt++
}

// storeStopped is what the log says of a turn stopped because the store
// refused its events.
const storeStopped = "the event store could not take writes; the turn was stopped"

// write appends evs, and runs mutate in the same transaction, after every
// write of the sandbox that waits. A write the store refuses waits in
// memory and is retried until it goes through; the error, unavailable,
// says so to a caller that answers a request. A write refused for what it
// is (an unknown sandbox) is logged and dropped, as no retry would change it.
func (b *box) write(evs []*sandbox.Event, mutate func(*sandbox.State) error) error {
	if len(evs) == 0 && mutate == nil {
		return nil
	}
	if b.writes.waiting() {
		b.hold(evs, mutate)
		return b.writes.err()
	}
	err := b.append(evs, mutate)
	switch {
	case err == nil:
		return nil
	case storeFault(err):
		b.log().Error("append failed; the events wait in memory until the store takes them", "err", err, "events", len(evs))
		b.hold(evs, mutate)
		b.writes.refused(err, b.c.backoff(b.writes.attempt))
		return unavailable(err)
	default:
		b.log().Error("append refused", "err", err, "events", len(evs))
		return err
	}
}

// tryWrite is write for what may be refused whole: a write that begins
// something (a turn, a delete) before the request is answered. A store
// fault leaves nothing waiting; the caller undoes what it began and
// answers unavailable.
func (b *box) tryWrite(evs []*sandbox.Event, mutate func(*sandbox.State) error) error {
	if b.writes.waiting() {
		return b.writes.err()
	}
	err := b.append(evs, mutate)
	if storeFault(err) {
		b.log().Warn("append failed; the request that made it is answered unavailable", "err", err)
		return unavailable(err)
	}
	return err
}

// append is one store write, with what it tells of the store's health.
func (b *box) append(evs []*sandbox.Event, mutate func(*sandbox.State) error) error {
	err := b.c.store.Append(context.Background(), b.id, evs, mutate)
	b.c.noteWrite(b.id, err)
	if err == nil {
		b.observe(evs)
	}
	return err
}

func (b *box) hold(evs []*sandbox.Event, mutate func(*sandbox.State) error) {
	w := &b.writes
	if !w.waiting() {
		b.c.stalled.Add(1)
	}
	w.queue = append(w.queue, pendingWrite{evs: evs, mutate: mutate})
	w.events += len(evs)
	b.c.cfg.Observer.EventsWaiting(len(evs))
}

// retryWrites makes the waiting writes, oldest first, until the store
// refuses one again (then it tries later) or none is left.
func (b *box) retryWrites() {
	w := &b.writes
	if !w.waiting() {
		return
	}
	for w.waiting() {
		next := w.queue[0]
		b.c.cfg.Observer.AppendRetried()
		err := b.append(next.evs, next.mutate)
		if storeFault(err) {
			b.log().Warn("append still refused; trying again later", "err", err, "events_waiting", w.events, "attempt", w.attempt)
			w.refused(err, b.c.backoff(w.attempt))
			return
		}
		if err != nil {
			b.log().Error("append refused", "err", err, "events", len(next.evs))
		}
		w.queue[0] = pendingWrite{}
		w.queue = w.queue[1:]
		w.events -= len(next.evs)
		b.c.cfg.Observer.EventsWaiting(-len(next.evs))
	}
	b.log().Info("the writes that waited are durable", "attempts", w.attempt)
	b.settled()
}

// settled forgets the retry state once nothing waits.
func (b *box) settled() {
	w := &b.writes
	w.queue, w.lastErr, w.attempt = nil, nil, 0
	w.retry.Stop()
	b.c.stalled.Add(-1)
}

// dropPending forgets the waiting writes without making them: the box
// lets go of its sandbox (see abandon), or the server stops with the store
// still refusing them. Whoever settles the sandbox next (the next start's
// Recover, the node that takes it over) ends its open turn from what is
// durable.
func (b *box) dropPending() {
	w := &b.writes
	if !w.waiting() {
		return
	}
	b.log().Error("writes the event store never took are dropped; the open turn is settled from what is durable when the sandbox is next recovered",
		"events", w.events, "err", w.lastErr)
	b.c.cfg.Observer.EventsWaiting(-w.events)
	w.events = 0
	b.settled()
}

// stopForStore ends the open turn once a write of the sandbox waits: the
// agent goes on working while nothing of what it does can be recorded, so
// the turn cannot go on. It is stopped like a timed-out turn, its events
// queue behind what waits, and its turn.completed (failed, internal, or
// canceled when the user had canceled it) lands when the store is back.
// It runs after each step of the box, so the step that hit the refusal
// finishes as it began.
func (b *box) stopForStore() {
	if !b.writes.waiting() || b.turn == nil {
		return
	}
	b.log().Warn("stopping the turn: the event store refuses its events", "turn_id", b.turn.turn.ID)
	res := translate.TurnResult{Err: &sandbox.ErrorInfo{Code: sandbox.ErrInternal, Message: storeStopped}}
	if b.turn.canceled {
		res = translate.TurnResult{Canceled: true} // the user's cancel decides, as it does whatever the agent says
	}
	b.stopAgent()
	evs := b.tr.Error(sandbox.ErrInternal, storeStopped)
	evs = b.endTurn(res, evs...)
	b.setStatus(sandbox.StatusStopped, "the agent was stopped because the event store could not take writes; it starts again with the next turn", evs...)
}
