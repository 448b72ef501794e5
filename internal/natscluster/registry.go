package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// This node's registration in the node bucket and its renewal, and
// liveness: whether this node's leases hold now (held, Ready, the hook the
// store asks) and whether another node's instance is registered (isLive).

// liveNode is a node instance seen live, trusted until a short while later.
type liveNode struct {
	instance string
	url      string // its API, as its key had it
	until    time.Time
}

func (c *Cluster) record(instance string) []byte {
	c.mu.Lock()
	api := c.apiURL
	c.mu.Unlock()
	b, _ := json.Marshal(nodeRecord{Node: c.node, Instance: instance, APIURL: api, TTLMillis: c.ttl.Milliseconds(), Renewed: time.Now().UTC()})
	return b
}

// register writes this node's key under a new instance. A key of a live
// node of the same name is left alone; one of this node's own earlier
// instance (it lapsed here, not yet on the server) is replaced, which ends
// that instance's leases at once. A new instance holds nothing yet: once
// the store's fences are this node's (after Join), re-registering drops
// them all.
func (c *Cluster) register(ctx context.Context) error {
	c.mu.Lock()
	prev := c.instance
	c.mu.Unlock()
	inst := sandbox.NewID("inst_")
	start := time.Now()
	rev, err := c.nodes.Create(ctx, c.node, c.record(inst))
	if errors.Is(err, jetstream.ErrKeyExists) {
		kve, gerr := c.nodes.Get(ctx, c.node)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			rev, err = c.nodes.Create(ctx, c.node, c.record(inst))
		case gerr != nil:
			return fmt.Errorf("cluster: read node key %s: %w", c.node, gerr)
		default:
			var rec nodeRecord
			if json.Unmarshal(kve.Value(), &rec) != nil || prev == "" || rec.Instance != prev {
				return fmt.Errorf("%w: %s (a stopped node's key expires %s after its last renewal)", ErrNodeInUse, c.node, c.ttl)
			}
			rev, err = c.nodes.Update(ctx, c.node, c.record(inst), kve.Revision())
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: register node %s: %w", c.node, err)
	}
	c.mu.Lock()
	c.instance, c.rev, c.until = inst, rev, start.Add(c.ttl-c.margin)
	clear(c.owned)
	fences := c.fences
	c.mu.Unlock()
	if fences != nil {
		fences.LoseAll()
	}
	return nil
}

// Renew renews this node's key. See cluster.Cluster.
func (c *Cluster) Renew(ctx context.Context) (time.Time, error) {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	c.mu.Lock()
	inst, rev, until, closed := c.instance, c.rev, c.until, c.closed
	c.mu.Unlock()
	if closed {
		return time.Time{}, errors.New("cluster: this node left the cluster")
	}
	if rev == 0 {
		if err := c.register(ctx); err != nil {
			return time.Time{}, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.until, nil
	}
	start := time.Now()
	if !start.Before(until) {
		c.lapse(inst)
		return until, cluster.ErrLeaseLost
	}
	newRev, err := c.nodes.Update(ctx, c.node, c.record(inst), rev)
	switch {
	case isConflict(err):
		// The key expired (and maybe another process took the name).
		c.lapse(inst)
		return until, cluster.ErrLeaseLost
	case err != nil:
		return until, fmt.Errorf("cluster: renew node %s: %w", c.node, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.instance == inst && c.rev == rev {
		c.rev, c.until = newRev, start.Add(c.ttl-c.margin)
	}
	return c.until, nil
}

// lapse forgets the leases of instance inst, and the store its holds on
// their logs, so that nothing more is written to them from here.
func (c *Cluster) lapse(inst string) {
	c.mu.Lock()
	lapsed := c.instance == inst
	if lapsed {
		c.rev = 0
		clear(c.owned)
	}
	c.mu.Unlock()
	if lapsed {
		c.fences.LoseAll()
	}
}

// held returns this node's instance if its leases hold now.
func (c *Cluster) held() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instance, c.rev != 0 && time.Now().Before(c.until)
}

// leasesHold reports whether this node's leases hold now: the hook the
// store asks before a fenced append.
func (c *Cluster) leasesHold() bool {
	_, ok := c.held()
	return ok
}

// Ready reports whether this node's leases hold now: it is registered and
// renewed them within the TTL, so it can run sandboxes. A node that lost
// NATS stops being ready before another may take its sandboxes.
func (c *Cluster) Ready() error {
	if _, ok := c.held(); !ok {
		return fmt.Errorf("node %s holds no leases: its renewals in NATS did not succeed in time", c.node)
	}
	return nil
}

// isLive reports whether instance inst of node is registered. A live answer
// is remembered for a moment (TTL/4), which only ever delays a takeover; a
// gone one is never remembered.
func (c *Cluster) isLive(ctx context.Context, node, inst string) (bool, error) {
	now := time.Now()
	c.mu.Lock()
	m, ok := c.alive[node]
	c.mu.Unlock()
	if ok && m.instance == inst && now.Before(m.until) {
		return true, nil
	}
	if !validToken(node) {
		return false, nil
	}
	kve, err := c.nodes.Get(ctx, node)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: read node key %s: %w", node, err)
	}
	var rec nodeRecord
	if json.Unmarshal(kve.Value(), &rec) != nil || rec.Instance != inst {
		return false, nil
	}
	c.mu.Lock()
	c.alive[node] = liveNode{instance: inst, url: rec.APIURL, until: now.Add(c.ttl / 4)}
	c.mu.Unlock()
	return true, nil
}
