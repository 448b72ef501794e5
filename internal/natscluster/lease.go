package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Claims and releases of the sandboxes' leases, and the fence that a
// claim puts up before it returns (see doc.go, "Fences: the seam with
// the store").

// Holds reports, from memory, whether this node holds the lease of
// sandbox id now: its leases hold and it claimed that one.
func (c *Cluster) Holds(id string) bool {
	if _, ok := c.held(); !ok {
		return false
	}
	c.mu.Lock()
	_, mine := c.owned[id]
	c.mu.Unlock()
	return mine && c.fences.Holding(id)
}

// errLapsed is a claim while this node's leases have lapsed: it could not
// renew them, NATS being unreachable (or the process paused), and holds
// no sandbox until it registers again.
var errLapsed = sandbox.Errorf(sandbox.EUnavailable,
	"this node's leases have lapsed: NATS did not answer their renewals in time; it takes sandboxes again once NATS answers; try again shortly")

// Claim takes or looks up the lease of a sandbox. See cluster.Cluster.
//
// While NATS is known unreachable, or this node's leases lapsed (its
// renewals got no answer), it fails at once as unavailable; a claim whose
// requests get no answer fails as unavailable too.
func (c *Cluster) Claim(ctx context.Context, id string) (_ cluster.Claim, err error) {
	if !validID(id) {
		return cluster.Claim{}, notFound(id)
	}
	inst, ok := c.held()
	if !ok {
		return cluster.Claim{}, errLapsed
	}
	c.mu.Lock()
	_, mine := c.owned[id]
	c.mu.Unlock()
	if mine && c.fences.Holding(id) {
		return cluster.Claim{Owner: c.node}, nil
	}
	if err := c.store.Unreachable(); err != nil {
		return cluster.Claim{}, err
	}
	caller := ctx
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	// Its reads are given up as soon as NATS is found unreachable, its
	// writes a little later, as the store's are (see natsstore's reach.go).
	rctx, cut := c.store.CutOff(ctx)
	defer cut()
	ctx, cutWrites := c.store.CutOffWrites(ctx)
	defer cutWrites()
	// rctx is cut off first, whichever request NATS left unanswered.
	defer func() { err = c.store.Classify(caller, rctx, err) }()
	mineNow := string(c.leaseValue(inst))
	for attempt := 1; ; attempt++ {
		var rev uint64
		kve, err := c.leases.Get(rctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err = c.leases.Create(ctx, id, []byte(mineNow))
		case err != nil:
			return cluster.Claim{}, fmt.Errorf("cluster: read lease of %s: %w", id, err)
		default:
			var rec nodeRecord
			if json.Unmarshal(kve.Value(), &rec) == nil {
				if rec.Node == c.node && rec.Instance == inst {
					// Held by this instance already; its fence may not be
					// up yet (an earlier claim failed half-way).
					if err := c.fence(ctx, inst, id); err != nil {
						return cluster.Claim{}, err
					}
					c.own(inst, id, kve.Revision())
					return cluster.Claim{Owner: c.node}, nil
				}
				live, lerr := c.isLive(rctx, rec.Node, rec.Instance)
				if lerr != nil {
					return cluster.Claim{}, lerr
				}
				if live {
					return cluster.Claim{Owner: rec.Node}, nil
				}
			}
			rev, err = c.leases.Update(ctx, id, []byte(mineNow), kve.Revision())
		}
		if err == nil {
			// The lease is this node's; before it writes, the fence shuts
			// out the writes of the one before it.
			if err := c.fence(ctx, inst, id); err != nil {
				return cluster.Claim{}, err
			}
			c.own(inst, id, rev)
			return cluster.Claim{Owner: c.node, Taken: true}, nil
		}
		if !isConflict(err) || attempt == maxConflicts {
			return cluster.Claim{}, fmt.Errorf("cluster: take lease of %s: %w", id, err)
		}
		natsstore.Backoff(ctx, attempt) // another node wrote the lease meanwhile: look again
	}
}

// fence puts up this instance's fence on the log of sandbox id, unless it
// holds one already.
func (c *Cluster) fence(ctx context.Context, inst, id string) error {
	if c.fences.Holding(id) {
		return nil
	}
	if _, err := c.fences.Hold(ctx, id, c.leaseValue(inst)); err != nil {
		return fmt.Errorf("cluster: fence the log of %s: %w", id, err)
	}
	return nil
}

func (c *Cluster) leaseValue(inst string) []byte {
	b, _ := json.Marshal(nodeRecord{Node: c.node, Instance: inst})
	return b
}

func (c *Cluster) own(inst, id string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.instance == inst && c.rev != 0 {
		c.owned[id] = rev
	}
}

// Release deletes this node's lease of a sandbox, if it holds it.
func (c *Cluster) Release(ctx context.Context, id string) (err error) {
	c.mu.Lock()
	rev, ok := c.owned[id]
	delete(c.owned, id)
	c.mu.Unlock()
	c.fences.Lose(id)
	if !ok {
		return nil
	}
	if err := c.store.Unreachable(); err != nil {
		return err
	}
	caller := ctx
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	ctx, cut := c.store.CutOffWrites(ctx)
	defer cut()
	defer func() { err = c.store.Classify(caller, ctx, err) }()
	err = c.leases.Delete(ctx, id, jetstream.LastRevision(rev))
	if isConflict(err) {
		return nil // taken over meanwhile: not ours to delete
	}
	return err
}
