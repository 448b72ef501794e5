package coordinator

import (
	"context"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// Queued turns.
//
// A turn sent with queue while another is open waits in the box's queue,
// first come first, at most maxQueuedTurns. It is accepted (202) only once
// its turn.queued is durable: a 202 is a promise, and the log is what
// keeps it. The first queued turn starts in the step after the open one
// ended, however that ended (succeeded, failed, canceled, its agent gone:
// it boots the agent again). Each queued turn ends with a turn.completed:
// after its own turn.started when it ran, alone when it never did
// (canceled while queued, its sandbox deleted, its agent unable to start,
// the server stopped or restarted before it ran). A restart does not run
// what was queued: recovery completes it failed with
// coordinator_restarted, like the turn that ran (docs/decisions.md).

// maxQueuedTurns bounds the turns waiting behind the open one.
const maxQueuedTurns = 16

// enqueue accepts t to run after the open turn and the turns queued
// before it.
func (b *box) enqueue(t *turnRun) (sandbox.Turn, error) {
	if len(b.queue) >= maxQueuedTurns {
		return sandbox.Turn{}, sandbox.Errorf(sandbox.EConflict,
			"%d turns are queued already, the most a sandbox queues; send it again once one has started", maxQueuedTurns)
	}
	ev := &sandbox.Event{
		Type: sandbox.TypeTurnQueued, TS: t.turn.CreatedAt, SandboxID: b.id, TurnID: t.turn.ID,
		Data: &sandbox.TurnQueuedData{Input: t.turn.Input, Position: len(b.queue) + 1},
	}
	if err := b.tryWrite([]*sandbox.Event{ev}, b.refuseDeleted); err != nil {
		if sandbox.IsType(err, sandbox.EConflict) {
			b.deleted = true
		}
		return sandbox.Turn{}, err
	}
	t.accepted = true
	b.queue = append(b.queue, t)
	return t.turn, nil
}

// nextTurn makes the first queued turn the open one once none is open,
// the sandbox is there and its writes are not waiting for the store. The
// box runs it after every step.
func (b *box) nextTurn() {
	for b.turn == nil && len(b.queue) > 0 && !b.deleted && !b.writes.waiting() {
		t := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if err := b.c.admitDisk(b.id); err != nil {
			// Its workspace is over its limit, or the disk is full: it
			// would be stopped at once.
			b.emit(b.endUnrun([]*turnRun{t}, translate.TurnResult{Err: &sandbox.ErrorInfo{Code: diskFull, Message: err.Error()}}))
			continue
		}
		b.turn = t
		if b.conn != nil {
			b.runTurn()
			return
		}
		b.boot(true)
	}
}

// queuedAt returns where turn id waits in the queue, or -1.
func (b *box) queuedAt(id string) int {
	for i, t := range b.queue {
		if t.turn.ID == id {
			return i
		}
	}
	return -1
}

// cancelQueued ends queued turn i canceled, without running it.
func (b *box) cancelQueued(i int) (sandbox.Turn, error) {
	t := b.queue[i]
	b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
	// A refused write leaves the cancel standing, as for a turn waiting
	// for its agent (cancel).
	if err := b.emit(b.endUnrun([]*turnRun{t}, translate.TurnResult{Canceled: true})); err != nil {
		return sandbox.Turn{}, err
	}
	return b.c.store.Turn(context.Background(), b.id, t.turn.ID)
}

// endQueue ends every queued turn with res, without running it, and
// returns their turn.completed events for the caller to write with its own.
func (b *box) endQueue(res translate.TurnResult) []*sandbox.Event {
	q := b.queue
	b.queue = nil
	return b.endUnrun(q, res)
}

// endUnrun returns the turn.completed of turns that never started:
// canceled for a cancel or a stop (with the stop's error), failed with
// the error otherwise. Their messages are the coordinator's own, curated
// by whoever made them.
func (b *box) endUnrun(turns []*turnRun, res translate.TurnResult) []*sandbox.Event {
	now := b.c.now()
	evs := make([]*sandbox.Event, 0, len(turns))
	for _, t := range turns {
		done := &sandbox.TurnCompleted{DurationMS: now.Sub(t.turn.CreatedAt).Milliseconds()}
		switch {
		case res.Canceled:
			done.Status, done.StopReason = sandbox.TurnCanceled, sandbox.StopCanceled
		case res.Stopped != nil:
			done.Status, done.StopReason, done.Error = sandbox.TurnCanceled, sandbox.StopCanceled, res.Stopped
		default:
			done.Status, done.StopReason, done.Error = sandbox.TurnFailed, sandbox.StopError, res.Err
		}
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeTurnCompleted, TS: now, SandboxID: b.id, TurnID: t.turn.ID, Data: done})
	}
	return evs
}

// queueStopped is how queued turns end when the server stops before they
// ran.
var queueStopped = translate.TurnResult{Stopped: &sandbox.ErrorInfo{
	Code:    sandbox.ErrServerStopped,
	Message: "the server stopped before this turn ran; send the prompt again to run it",
}}
