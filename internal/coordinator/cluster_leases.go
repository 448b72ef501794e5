package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The background side of a cluster: the leases are renewed, the runtimes
// stop when they lapse, and sandboxes whose node went away are settled.

// leaseLoop renews this node's leases every TTL/3. When they lapse (a
// renewal refused, or none succeeded in time) every runtime here stops
// without writing, since another node may already be settling its sandbox.
func (l *leased) leaseLoop(ctx context.Context) {
	c := l.c
	ttl := l.cl.TTL()
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	lapse := stoppedTimer()
	defer lapse.Stop()
	var until time.Time // the node registered a moment ago; Renew knows
	for {
		var err error
		until, err = l.renew(ctx, until)
		if errors.Is(err, cluster.ErrLeaseLost) {
			c.log.Warn("cluster: this node's leases lapsed; stopping its agents", "node", l.node)
			l.abandonAll()
			// A new set of leases, at once: the node serves again.
			until, err = l.renew(ctx, time.Time{})
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: lease renewal failed", "node", l.node, "err", err, "holds_for", time.Until(until).Round(time.Millisecond))
		}
		lapse.Stop()
		if d := time.Until(until); d > 0 {
			lapse.Reset(d)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-lapse.C:
		}
	}
}

// renew is one renewal. It is given up after TTL/3, when the next one is
// due, or earlier when the leases would lapse (until), so that the loop is
// back in time to stop the runtimes if it failed. After a lapse (until
// passed) it has the TTL/3 to register again.
func (l *leased) renew(ctx context.Context, until time.Time) (time.Time, error) {
	deadline := time.Now().Add(l.cl.TTL() / 3)
	if time.Now().Before(until) && until.Before(deadline) {
		deadline = until
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return l.cl.Renew(ctx)
}

// abandonAll stops every runtime of this node without writing: their
// sandboxes' leases lapsed. Whoever takes a lease over settles the turns
// and approvals left open, as after a crash.
func (l *leased) abandonAll() {
	c := l.c
	c.mu.Lock()
	boxes := c.boxes
	c.boxes = map[string]*box{}
	c.mu.Unlock()
	l.mu.Lock()
	l.epoch++
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range boxes {
		wg.Go(func() { _ = b.do(context.Background(), b.abandon) })
	}
	wg.Wait()
}

// retire abandons one box made while the leases lapsed.
func (c *Coordinator) retire(b *box) {
	c.mu.Lock()
	if c.boxes[b.id] == b {
		delete(c.boxes, b.id)
	}
	c.mu.Unlock()
	_ = b.do(context.Background(), b.abandon)
}

// abandon lets go of the sandbox without a word in its log: the agent is
// stopped, the turn and approvals forgotten, and the box refuses further
// work (it is out of the coordinator's map; a new box takes over if the
// lease comes back). It runs on the box goroutine.
func (b *box) abandon() {
	b.deleted = true // refuses new work and discards a boot in flight
	b.forgetTurns()
	b.tr = nil // nothing left to flush
	b.dropPending()
	if b.conn != nil {
		conn := b.conn
		b.setConn(nil)
		conn.Close()
		b.releaseSlot()
	}
}

// sweepLoop settles, every TTL, the sandboxes whose node went away, so
// their open turns end even if nobody calls them.
func (l *leased) sweepLoop(ctx context.Context) {
	ticker := time.NewTicker(l.cl.TTL())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := l.sweep(ctx); err != nil && ctx.Err() == nil {
			l.c.log.Warn("cluster: sweep failed", "node", l.node, "err", err)
		}
	}
}

// sweep takes over every sandbox that may have something running (an open
// turn, an agent up) and whose lease is free or lapsed, and settles it.
func (l *leased) sweep(ctx context.Context) error {
	c := l.c
	var (
		failed int
		first  error
	)
	after := ""
	for {
		list, more, err := c.store.Sandboxes(ctx, after, 100)
		if err != nil {
			return err
		}
		for _, sb := range list {
			after = sb.ID
			if !needsOwner(sb) || c.existingBox(sb.ID) != nil {
				continue
			}
			if _, _, err := l.claim(ctx, sb.ID, false); err != nil {
				if failed++; first == nil {
					first = fmt.Errorf("sandbox %s: %w", sb.ID, err)
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if !more || len(list) == 0 {
			if failed > 1 {
				return fmt.Errorf("%d sandboxes could not be settled; the first: %w", failed, first)
			}
			return first
		}
	}
}

// needsOwner reports whether a sandbox may have a runtime somewhere.
func needsOwner(sb sandbox.Sandbox) bool {
	if sb.CurrentTurn != nil {
		return true
	}
	switch sb.Status {
	case sandbox.StatusCreating, sandbox.StatusBooting, sandbox.StatusReady, sandbox.StatusStopping:
		return true
	}
	return false
}
