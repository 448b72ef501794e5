package coordinator

import (
	"fmt"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// The event log's byte bound (Config.LogMaxBytes).
//
// Retention keeps a log within its bound by pruning finished turns, but a
// running turn is never pruned: an agent that floods one turn with large
// tool calls would grow the log, and the disk under it, without end. So
// after each step of the box, as stopForStore does, the box asks the store
// what the running turn has written (the stores count it with each append,
// sandbox.State.TurnBytes) and stops a turn that alone outgrew the bound,
// as a timed-out turn is stopped: session/cancel, the agent's grace, then
// its process, so that nothing more of the turn arrives. The turn fails
// with sandbox.error log_full, and its end is written like any other, so
// the log overshoots the bound by at most the step that crossed it (one
// append, of about maxUpdateBytes of the agent's updates) and the turn's
// end.
//
// A log past its bound with finished turns in it is retention's to prune;
// the box tells it at once (Config.LogOver) instead of leaving it to the
// next pass: each time it finds the log past the bound after finding it
// within, and when it stops a turn. Retention prunes such a log an eighth
// of the bound below it, so a turn that keeps writing crosses it again
// only after that much more.

// logBytesWatch is what a box remembers of its log's size between steps.
type logBytesWatch struct {
	turn bool // a turn ran at the last step: its last events need a look
	over bool // the log is past its bound and retention was told
}

// logSizer is what a store that counts its logs' bytes answers; both
// stores do.
type logSizer interface {
	LogBytes(id string) (log, turn uint64, err error)
}

// stopForLogBytes ends the running turn once its own events outgrow the
// log's bound, and tells retention of a log past it. It looks while a turn
// runs and once after, since the step that ends a turn writes its last
// events; the log does not grow otherwise.
func (b *box) stopForLogBytes() {
	limit := b.c.cfg.LogMaxBytes
	t := b.turn
	running := t != nil && t.running
	look := running || b.logBytes.turn
	b.logBytes.turn = running
	if limit <= 0 || !look || b.writes.waiting() {
		return
	}
	sizer, ok := b.c.store.(logSizer)
	if !ok {
		return
	}
	log, turn, err := sizer.LogBytes(b.id)
	if err != nil {
		b.log().Warn("cannot read the size of the event log", "err", err)
		return
	}
	switch {
	case log <= uint64(limit):
		b.logBytes.over = false
	case !b.logBytes.over:
		b.logBytes.over = true
		b.nudge()
	}
	if !running || turn <= uint64(limit) {
		return
	}
	msg := fmt.Sprintf("the turn wrote %s to the event log, more than the %s a sandbox's log may hold (--retention-max-bytes); it was stopped",
		byteSize(turn), byteSize(uint64(limit)))
	b.log().Warn("stopping the turn: its events outgrew the event log's bound", "turn_id", t.turn.ID, "bytes", turn, "max_bytes", limit)
	res := translate.TurnResult{Err: &sandbox.ErrorInfo{Code: sandbox.ErrLogFull, Message: msg}}
	if t.canceled {
		res = translate.TurnResult{Canceled: true} // the user's cancel decides, as it does whatever the agent says
	}
	b.stopAgent()
	// Retention is told before the turn's end is written, so that whoever
	// sees the turn fail or the box stop finds retention already told, and
	// again after, when the stopped turn is finished and its own events
	// may be pruned too.
	b.nudge()
	evs := b.tr.Error(sandbox.ErrLogFull, msg)
	evs = b.endTurn(res, evs...)
	b.setStatus(sandbox.StatusStopped, "the agent was stopped because its turn outgrew the event log's byte bound; it starts again with the next turn", evs...)
	b.nudge()
}

// nudge tells retention of a log past its bound.
func (b *box) nudge() {
	if f := b.c.cfg.LogOver; f != nil {
		f(b.id)
	}
}

// byteSize writes a byte count for people.
func byteSize(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
