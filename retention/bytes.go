package retention

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The byte bound (Config.MaxBytes).
//
// The stores count the bytes of each retained log as they write it
// (sandbox.State.LogBytes), so a pass knows without reading a log whether
// it is over its bound. If it is, the prune goes on past what age and
// count remove, through the oldest turns, and ends where a turn ends
// (after its turn.completed, or after an event outside any turn) once the
// log is an eighth of the bound below it: a reader never finds a turn with
// its start pruned and its end retained, and a turn that keeps writing
// passes the bound again only after that eighth, not at its next event. Two exceptions keep the bound cheap and
// true. The running turn (the sandbox's current turn) and what follows it
// are never pruned for bytes: the coordinator stops a turn that alone
// outgrows the bound. A finished turn larger than the bound is cut inside
// instead of removed whole, so its end (the sandbox.error and the
// turn.completed that say why it failed) stays in the log. Finding the
// cut reads the records it removes and no more, as the count does; the
// running turn is not read, since its turn.started ends the search.
//
// Between passes a flooding agent can write a bound's worth in seconds, so
// the coordinator nudges the loop (Nudge) when a log grows past it, and
// the loop runs that sandbox's share of a pass at once. Each such pass
// reads the running turn again (compaction waits for its end), so the
// eighth also bounds how often that happens: at most eight times for a
// turn that writes a whole bound.

// position is a record a prune may end at: its id and how many records of
// the scan lead up to it, itself included.
type position struct {
	id uint64
	n  int
}

// cut finds where one prune ends: after the prefix of the log that age and
// count remove, or after the oldest turns whose bytes bring the log under
// its bound, whichever is further. Feed it the records from the head of the
// log, in order, while visit says so.
type cut struct {
	batch int
	marks []uint64 // the id of every batch-th record: the batches' ends
	seen  int
	prev  position

	// Age and count remove a prefix: the records while either holds.
	excess int
	cutoff time.Time
	head   bool
	byAge  position

	// Bytes remove whole turns (see above).
	need      uint64 // bytes to remove, down to 7/8 of the bound; 0 within it
	max       uint64 // the bound: a finished turn above it is cut inside
	current   string // the running turn, which stays whole
	bytes     bool   // still looking for the byte cut
	cum       uint64 // bytes of the records seen
	span      bool   // inside a turn, from its turn.started to its turn.completed
	spanBytes uint64
	mid       position // in the span, the first record where cum reaches need
	byBytes   position
}

func newCut(batch, excess int, cutoff time.Time, logBytes, maxBytes uint64, current string) *cut {
	c := &cut{batch: batch, excess: excess, cutoff: cutoff, head: true, max: maxBytes, current: current}
	if logBytes > maxBytes {
		c.need, c.bytes = logBytes-(maxBytes-maxBytes/8), true
	}
	return c
}

// visit takes the next record and reports whether the cut may reach past it.
func (c *cut) visit(rec sandbox.Record) (bool, error) {
	c.seen++
	if c.seen%c.batch == 0 {
		c.marks = append(c.marks, rec.ID)
	}
	if c.head {
		ok := c.seen <= c.excess
		if !ok {
			ts, err := recordTS(rec)
			if err != nil {
				return false, fmt.Errorf("event %d: %w", rec.ID, err)
			}
			ok = ts.Before(c.cutoff)
		}
		if ok {
			c.byAge = position{rec.ID, c.seen}
		} else {
			c.head = false
		}
	}
	if c.bytes {
		c.countBytes(rec)
	}
	c.prev = position{rec.ID, c.seen}
	return c.head || c.bytes, nil
}

func (c *cut) countBytes(rec sandbox.Record) {
	switch {
	case rec.Type == sandbox.TypeTurnStarted:
		if c.current != "" && recordTurnID(rec) == c.current {
			c.bytes = false // the running turn, and whatever follows, stay
			return
		}
		// A turn still open here never completed (turns run one at a
		// time): it ends before this one starts.
		if c.span && c.settle(c.prev) {
			return
		}
		c.span, c.spanBytes, c.mid = true, 0, position{}
	case c.seen == 1 && recordTurnID(rec) != "":
		// The scan begins inside a turn that an earlier prune cut.
		c.span, c.spanBytes, c.mid = true, 0, position{}
	}
	n := uint64(len(rec.JSON))
	c.cum += n
	here := position{rec.ID, c.seen}
	if !c.span {
		c.settle(here)
		return
	}
	c.spanBytes += n
	if c.mid.id == 0 && c.cum >= c.need {
		c.mid = here
	}
	if rec.Type == sandbox.TypeTurnCompleted {
		c.settle(here)
		c.span = false
	}
}

// settle records that the byte cut may end at pos, where a turn ends (or
// an event outside any turn), and ends the search once that removes
// enough. c.cum is the bytes up to pos.
func (c *cut) settle(pos position) bool {
	c.byBytes = pos
	if c.cum < c.need {
		return false
	}
	if c.span && c.spanBytes > c.max && c.mid.id != 0 {
		c.byBytes = c.mid // too large to keep: its end stays
	}
	c.bytes = false
	return true
}

// bounds returns the last id of every batch of records the prune removes,
// and how many records that is.
func (c *cut) bounds() (bounds []uint64, covered int) {
	end := c.byAge
	if c.byBytes.n > end.n {
		end = c.byBytes
	}
	if end.n == 0 {
		return nil, 0
	}
	bounds = slices.Clone(c.marks[:end.n/c.batch])
	if end.n%c.batch != 0 {
		bounds = append(bounds, end.id)
	}
	return bounds, end.n
}

var turnIDField = []byte(`,"turn_id":`)

// recordTurnID returns the turn_id of a record, "" for none, without
// decoding the rest of it: the envelope is written with turn_id before its
// data and in a fixed format.
func recordTurnID(rec sandbox.Record) string {
	head := rec.JSON[:min(len(rec.JSON), 512)]
	if i := bytes.Index(head, turnIDField); i >= 0 {
		rest := head[i+len(turnIDField):]
		if bytes.HasPrefix(rest, []byte("null")) {
			return ""
		}
		if len(rest) > 0 && rest[0] == '"' {
			if j := bytes.IndexByte(rest[1:], '"'); j >= 0 && bytes.IndexByte(rest[1:1+j], '\\') < 0 {
				return string(rest[1 : 1+j])
			}
		}
	}
	f, err := scanFieldsOf(rec)
	if err != nil {
		return ""
	}
	return f.TurnID
}

// Nudge asks the loop to run sandbox id's share of a pass now rather than
// at the next interval: the coordinator calls it when the sandbox's log
// grows past MaxBytes. It never blocks; nudges that come while the loop is
// busy are taken together after it, each sandbox once.
func (l *Loop) Nudge(id string) {
	l.mu.Lock()
	l.nudged[id] = true
	l.mu.Unlock()
	select {
	case l.nudge <- struct{}{}:
	default:
	}
}

// runNudged runs the share of a pass of every sandbox nudged since last
// time.
func (l *Loop) runNudged(ctx context.Context) {
	l.mu.Lock()
	ids := slices.Sorted(maps.Keys(l.nudged))
	clear(l.nudged)
	l.mu.Unlock()
	l.pass.Lock()
	defer l.pass.Unlock()
	var total Result
	for _, id := range ids {
		sb, err := l.cfg.Store.Sandbox(ctx, id)
		if err == nil {
			var res Result
			res, err = l.sandbox(ctx, sb, l.cfg.Now())
			total.add(res)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !sandbox.IsType(err, sandbox.ENotFound) && !sandbox.IsType(err, sandbox.ECursorPruned) {
			l.log.Error("retention of a nudged sandbox failed", "sandbox_id", id, "err", err)
		}
		l.heartbeat()
	}
	if l.cfg.Observer != nil {
		l.cfg.Observer.Retained(total.Pruned, total.Compacted)
	}
	if total.Pruned+total.Compacted+total.Dropped > 0 {
		l.log.Info("retention of nudged sandboxes", "sandboxes", len(ids), "pruned", total.Pruned,
			"compacted", total.Compacted, "dropped", total.Dropped)
	}
}
