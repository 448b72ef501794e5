package translate

import (
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// liveUsage is what the agent said of its usage during the turn
// (usage_update), curated, and what turn.usage last carried of it.
type liveUsage struct {
	cur    sandbox.Usage // context_tokens, context_window and cost so far
	has    bool          // an update said something
	sent   sandbox.Usage // the last turn.usage
	sentAt time.Time     // zero until the first turn.usage
	dirty  bool          // cur changed since sent, waiting for the interval
}

// rawCost is an ACP Cost: the session's cost so far.
type rawCost struct {
	Amount   *float64 `json:"amount"`
	Currency string   `json:"currency"`
}

// usageUpdate curates an ACP usage_update: the context window's tokens in
// use and its size, and the cost, each kept only when it makes sense (a
// count not negative, an amount not negative in a currency of three
// letters). A change emits turn.usage at once when none went out within
// the flush interval, else at the next Flush; an update that changes
// nothing emits nothing.
func (t *Translator) usageUpdate(now time.Time, u *rawUpdate) []*sandbox.Event {
	next := t.usage.cur
	said := false
	if u.Used != nil && *u.Used >= 0 {
		next.ContextTokens, next.ContextWindow, said = *u.Used, 0, true
		if u.Size != nil && *u.Size >= 0 {
			next.ContextWindow = *u.Size
		}
	}
	if c, ok := curateCost(u.Cost); ok {
		next.Cost, said = c, true
	} else if !isNull(u.Cost) {
		t.drop(DropMalformed)
	}
	if !said {
		return nil
	}
	t.usage.cur, t.usage.has = next, true
	if usageEqual(next, t.usage.sent) && !t.usage.sentAt.IsZero() {
		t.usage.dirty = false
		return nil
	}
	if t.usage.sentAt.IsZero() || now.Sub(t.usage.sentAt) >= t.interval {
		return []*sandbox.Event{t.emitUsage(now)}
	}
	t.usage.dirty = true
	return nil
}

// curateCost reads an ACP cost: ok is false when it is absent or makes no
// sense.
func curateCost(raw json.RawMessage) (*sandbox.Cost, bool) {
	if isNull(raw) {
		return nil, false
	}
	var c rawCost
	if json.Unmarshal(raw, &c) != nil || c.Amount == nil {
		return nil, false
	}
	a := *c.Amount
	if math.IsNaN(a) || math.IsInf(a, 0) || a < 0 {
		return nil, false
	}
	cur := strings.ToUpper(c.Currency)
	if len(cur) != 3 || strings.Trim(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return nil, false
	}
	return &sandbox.Cost{Amount: a, Currency: cur}, true
}

func (t *Translator) emitUsage(now time.Time) *sandbox.Event {
	t.usage.sent, t.usage.sentAt, t.usage.dirty = t.usage.cur, now, false
	return t.event(now, sandbox.TypeTurnUsage, &sandbox.TurnUsage{Usage: *t.usage.cur.Clone()})
}

// flushUsage emits the coalesced turn.usage whose interval has passed.
func (t *Translator) flushUsage(now time.Time) []*sandbox.Event {
	if !t.usage.dirty || now.Sub(t.usage.sentAt) < t.interval {
		return nil
	}
	return []*sandbox.Event{t.emitUsage(now)}
}

// nextUsage returns when flushUsage next has something to emit.
func (t *Translator) nextUsage() (time.Time, bool) {
	if !t.usage.dirty {
		return time.Time{}, false
	}
	return t.usage.sentAt.Add(t.interval), true
}

// turnUsage is the usage of turn.completed: the prompt answer's token
// counts (r), with the last context window and cost the agent said; nil
// when there was neither. A turn.usage still waiting for its interval is
// not sent: turn.completed carries the same figures.
func (t *Translator) turnUsage(r *sandbox.Usage) *sandbox.Usage {
	if r == nil && !t.usage.has {
		return nil
	}
	out := &sandbox.Usage{}
	if r != nil {
		out = r.Clone()
	}
	if t.usage.has {
		out.ContextTokens, out.ContextWindow = t.usage.cur.ContextTokens, t.usage.cur.ContextWindow
		out.Cost = sandbox.ClonePtr(t.usage.cur.Cost)
	}
	return out
}

func usageEqual(a, b sandbox.Usage) bool {
	ac, bc := a.Cost, b.Cost
	a.Cost, b.Cost = nil, nil
	return a == b && (ac == nil) == (bc == nil) && (ac == nil || *ac == *bc)
}
