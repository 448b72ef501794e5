package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// An endpoint's runner: a worker per sandbox it delivers, started by a
// scan of the sandboxes or, on a shared store, by a claim of one nobody
// holds; and the endpoint's lag.

// runner delivers one endpoint's events: a worker per sandbox, sharing
// the endpoint's bound on requests in flight.
type runner struct {
	l       *Loop
	ep      Endpoint
	rec     []byte // the record it started on
	signer  *standardwebhooks.Webhook
	sem     chan struct{}
	cursors map[string]uint64 // loaded at start, then as saved; under mu

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	workers map[string]bool      // sandboxes with a worker
	claimed map[string]time.Time // when a sandbox held elsewhere was last tried
}

func (l *Loop) startRunner(ctx context.Context, ep Endpoint, rec []byte) (*runner, error) {
	signer, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	cursors, err := l.cfg.Store.WebhookCursors(ctx, ep.ID)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if r := l.rotated[ep.ID]; r.secret == ep.Secret {
		delete(l.rotated, ep.ID) // the record carries it now
	}
	l.mu.Unlock()
	rctx, cancel := context.WithCancel(ctx)
	return &runner{l: l, ep: ep, rec: rec, signer: signer, sem: make(chan struct{}, l.cfg.Concurrency),
		cursors: cursors, ctx: rctx, cancel: cancel, workers: map[string]bool{}, claimed: map[string]time.Time{}}, nil
}

func (r *runner) stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *runner) done() bool { return r.ctx.Err() != nil }

// claimEvery is how often a sandbox that another node may deliver is
// claimed again when it has events beyond the endpoint's cursor.
const claimEvery = 10 * time.Second

// consider starts a worker for sandbox id if this node delivers its
// events: always on a store of its own; on a shared one, when it holds
// the sandbox's lease, or takes it because the sandbox has undelivered
// events and no live node holds it.
func (r *runner) consider(ctx context.Context, id string) {
	l := r.l
	if l.cfg.Holds == nil || l.cfg.Holds(id) {
		r.startWorker(id)
		return
	}
	if l.cfg.Claim == nil {
		return
	}
	// A sandbox another node holds is looked at once every claimEvery,
	// not at every listing: its head may be a read of the store.
	r.mu.Lock()
	now := l.cfg.Now()
	last, tried := r.claimed[id]
	if tried && now.Sub(last) < claimEvery {
		r.mu.Unlock()
		return
	}
	r.claimed[id] = now
	cursor := r.cursors[id]
	r.mu.Unlock()
	if head, err := l.cfg.Log.Head(id); err != nil || head.LastEventID <= cursor {
		return
	}
	here, err := l.cfg.Claim(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("webhooks: claim a sandbox to deliver its events", "endpoint", r.ep.ID, "sandbox", id, "err", err)
		}
		return
	}
	if here {
		r.startWorker(id)
	}
}

// holds reports whether this node still delivers sandbox id.
func (r *runner) holds(id string) bool {
	return r.l.cfg.Holds == nil || r.l.cfg.Holds(id)
}

// lag counts the events beyond the endpoint's cursors of the sandboxes
// this runner has workers for.
func (r *runner) lag() uint64 {
	r.mu.Lock()
	cursors := make(map[string]uint64, len(r.workers))
	for id := range r.workers {
		cursors[id] = r.cursors[id]
	}
	r.mu.Unlock()
	var n uint64
	for id, c := range cursors {
		if h, err := r.l.cfg.Log.Head(id); err == nil && h.LastEventID > c {
			n += h.LastEventID - c
		}
	}
	return n
}

func (r *runner) startWorker(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers[id] || r.done() {
		return
	}
	r.workers[id] = true
	cursor, ok := r.cursors[id]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.work(id, cursor, ok)
		r.mu.Lock()
		delete(r.workers, id)
		r.mu.Unlock()
	}()
}
