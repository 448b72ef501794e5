package webhook

import (
	"context"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// keepDeliveries is how many recent attempts an endpoint's delivery log
// keeps, in memory, on the node that made them.
const keepDeliveries = 100

// epStats is what this node knows of one endpoint's deliveries. It
// outlives the endpoint's runners (a change of the record starts a new
// one) and goes with the endpoint's deletion.
type epStats struct {
	delivered, failed uint64
	recent            []sandbox.WebhookDelivery // oldest first
	pending           map[string]*pending       // by sandbox id
	waiters           map[string][]chan sandbox.WebhookDelivery
	runner            *runner // the one running, if any
}

// pending is the event a sandbox's worker is delivering: in flight, or
// waiting for its next attempt.
type pending struct {
	eventID uint64
	ts      time.Time // the event's
	failed  bool      // an attempt of it failed
	wake    chan struct{}
}

// statsOf returns the stats of endpoint id; l.mu is held.
func (l *Loop) statsOf(id string) *epStats {
	st := l.stats[id]
	if st == nil {
		st = &epStats{pending: map[string]*pending{}, waiters: map[string][]chan sandbox.WebhookDelivery{}}
		l.stats[id] = st
	}
	return st
}

// setRunner records r as the runner of its endpoint.
func (l *Loop) setRunner(id string, r *runner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.statsOf(id)
	if r == nil {
		st.pending = map[string]*pending{}
	}
	st.runner = r
}

// forget drops what this node knows of endpoint id.
func (l *Loop) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.stats, id)
}

// begin records that sandboxID's worker delivers rec now; the returned
// channel wakes its wait for a retry. end undoes it.
func (l *Loop) begin(id, sandboxID string, rec sandbox.Record) chan struct{} {
	ts, _ := eventTime(rec)
	p := &pending{eventID: rec.ID, ts: ts, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.statsOf(id).pending[sandboxID] = p
	return p.wake
}

func (l *Loop) end(id, sandboxID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.stats[id]; st != nil {
		delete(st.pending, sandboxID)
	}
}

// record keeps attempt a in its endpoint's log and figures, and answers
// whoever waits for it.
func (l *Loop) record(a Attempt) {
	d := a.Delivery()
	l.mu.Lock()
	st := l.statsOf(a.Endpoint)
	if a.OK() {
		st.delivered++
		if p := st.pending[a.SandboxID]; p != nil && p.eventID == a.EventID {
			delete(st.pending, a.SandboxID) // taken: before anyone is told
		}
	} else {
		st.failed++
		if p := st.pending[a.SandboxID]; p != nil && p.eventID == a.EventID {
			p.failed = true
		}
	}
	if len(st.recent) == keepDeliveries {
		st.recent = slices.Delete(st.recent, 0, 1)
	}
	st.recent = append(st.recent, d)
	waiters := st.waiters[a.WebhookID]
	delete(st.waiters, a.WebhookID)
	l.mu.Unlock()
	for _, ch := range waiters {
		ch <- d
	}
	if l.cfg.Observer != nil {
		l.cfg.Observer.WebhookAttempt(a.Endpoint, a.OK())
	}
	if l.cfg.OnAttempt != nil {
		l.cfg.OnAttempt(a)
	}
}

// Observer is told of every attempt, for metrics.
type Observer interface {
	WebhookAttempt(endpoint string, ok bool)
}

// deliveries returns endpoint id's recent attempts, newest first.
func (l *Loop) deliveries(id string) []sandbox.WebhookDelivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats[id]
	if st == nil {
		return nil
	}
	out := slices.Clone(st.recent)
	slices.Reverse(out)
	return out
}

// attempts counts the attempts of delivery kept in the log.
func (l *Loop) attempts(id, delivery string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	if st := l.stats[id]; st != nil {
		for _, d := range st.recent {
			if d.ID == delivery {
				n = max(n, d.Attempt)
			}
		}
	}
	return n
}

// Gauge is one endpoint's backlog on this node, for metrics.
type Gauge struct {
	Endpoint string
	// Lag counts the events beyond the endpoint's cursors up to the heads
	// of the logs this node delivers.
	Lag uint64
	// Oldest is the age of the oldest event being delivered or waiting
	// for a retry; zero when none is.
	Oldest time.Duration
}

// figures returns endpoint id's stats as the API shows them, and its state.
func (l *Loop) figures(ep Endpoint) (sandbox.WebhookStats, string) {
	var out sandbox.WebhookStats
	state := sandbox.WebhookActive
	l.mu.Lock()
	st := l.stats[ep.ID]
	var r *runner
	if st != nil {
		out.Delivered, out.Failed, r = st.delivered, st.failed, st.runner
		if n := len(st.recent); n > 0 {
			last := st.recent[n-1]
			out.LastAttempt = &last
		}
		for _, p := range st.pending {
			if p.failed {
				state = sandbox.WebhookFailing
			}
			if !p.ts.IsZero() && (out.OldestUndeliveredAt == nil || p.ts.Before(*out.OldestUndeliveredAt)) {
				ts := p.ts
				out.OldestUndeliveredAt = &ts
			}
		}
	}
	l.mu.Unlock()
	if r != nil {
		out.Lag = r.lag()
	}
	if !ep.Enabled {
		state = sandbox.WebhookDisabled
	}
	return out, state
}

// Gauges are every endpoint's backlog on this node.
func (l *Loop) Gauges(ctx context.Context) []Gauge {
	eps, err := List(ctx, l.cfg.Store)
	if err != nil {
		return nil
	}
	now := l.cfg.Now()
	out := make([]Gauge, 0, len(eps))
	for _, ep := range eps {
		s, _ := l.figures(ep)
		g := Gauge{Endpoint: ep.ID, Lag: s.Lag}
		if s.OldestUndeliveredAt != nil {
			g.Oldest = max(0, now.Sub(*s.OldestUndeliveredAt))
		}
		out = append(out, g)
	}
	return out
}
