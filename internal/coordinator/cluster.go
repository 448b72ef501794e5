package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// nodeLost is what the log says when a sandbox's node went away.
var nodeLost = settleReason{
	turn:   "the coordinator running this sandbox's agent stopped while this turn was open",
	status: "the coordinator running the agent stopped; the agent starts again with the next turn",
}

// errMoved is a call that reached a node which does not hold the lease.
var errMoved = errors.New("the sandbox's lease is held elsewhere")

// clusterRun is a coordinator's side of a cluster.
type clusterRun struct {
	cluster.Cluster
	node      string
	stopServe func()
	locks     idLocks

	mu    sync.Mutex
	epoch uint64                 // counts lapses; a box made in an older epoch holds no lease
	calls map[string]*servedCall // forwarded calls by ID, answered or in progress
}

// servedCall is a forwarded call this node runs or ran.
type servedCall struct {
	done     chan struct{}
	rep      cluster.Reply
	finished time.Time
}

// keepAnswers is how long a node remembers the answer of a forwarded call,
// for a retry of it.
const keepAnswers = 5 * time.Minute

func (r *clusterRun) currentEpoch() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

// startCluster serves forwarded calls and starts the lease and sweep loops.
func (c *Coordinator) startCluster(cl cluster.Cluster) error {
	r := &clusterRun{Cluster: cl, node: cl.Node(), calls: map[string]*servedCall{}}
	stop, err := cl.Serve(c.serveCall)
	if err != nil {
		return fmt.Errorf("serve forwarded calls: %w", err)
	}
	r.stopServe = stop
	c.cl = r
	c.store = leasedStore{Store: c.store, c: c}
	c.loop(c.leaseLoop)
	c.loop(c.sweepLoop)
	return nil
}

// leasedStore is the store as a node of a cluster writes it. An append
// the store refuses because this node no longer holds the sandbox's lease
// (ErrFenced: it lapsed, or another node took the sandbox over while this
// one was paused or cut off) retires the sandbox's runtime here: another
// node may be running it now. The store refuses every later append of
// this node to the sandbox until it claims the lease again, so whatever
// the runtime does before it is retired writes nothing.
type leasedStore struct {
	sandbox.Store
	c *Coordinator
}

func (s leasedStore) Append(ctx context.Context, id string, events []*sandbox.Event, mutate func(*sandbox.State) error) error {
	err := s.Store.Append(ctx, id, events, mutate)
	if errors.Is(err, cluster.ErrFenced) {
		s.c.fenced(id)
	}
	return err
}

// fenced retires this node's runtime of a sandbox whose lease it lost. The
// append that found out may be running on the box's own goroutine, which
// retiring waits for, so it is retired from another one. A claim of the
// sandbox by this node meanwhile finds no box and makes a new one, with
// the new lease; the old box's abandon is queued long before this node
// could win the lease back (a TTL of the other node's at least).
func (c *Coordinator) fenced(id string) {
	b := c.existingBox(id)
	if b == nil {
		return
	}
	c.log.Warn("cluster: this node lost the lease of a sandbox; stopping its agent without writing", "node", c.cl.node, "sandbox_id", id)
	go c.retire(b)
}

// loop runs fn in the background until Close.
func (c *Coordinator) loop(fn func(ctx context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn(c.ctx)
	}()
}

// claim makes sure of a sandbox's lease: it returns this node's box when
// this node holds it (taking it over and settling what the last holder
// left open if it was free or lapsed), or the node that holds it. With
// makeBox false it only takes over and settles.
func (c *Coordinator) claim(ctx context.Context, id string, makeBox bool) (*box, string, error) {
	unlock := c.cl.locks.lock(id)
	defer unlock()
	if b := c.existingBox(id); b != nil {
		return b, c.cl.node, nil
	}
	epoch := c.cl.currentEpoch()
	cl, err := c.cl.Claim(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if cl.Owner != c.cl.node {
		return nil, cl.Owner, nil
	}
	if cl.Taken {
		c.log.Info("cluster: took over sandbox", "node", c.cl.node, "sandbox_id", id)
		if err := c.recoverOne(ctx, id, nodeLost); err != nil {
			// Let go, so that whoever claims it next settles it.
			if rerr := c.cl.Release(context.WithoutCancel(ctx), id); rerr != nil {
				c.log.Warn("cluster: release after a failed settle", "sandbox_id", id, "err", rerr)
			}
			return nil, "", fmt.Errorf("settle sandbox %s: %w", id, err)
		}
	}
	if !makeBox {
		return nil, c.cl.node, nil
	}
	b, err := c.box(id)
	if err != nil {
		return nil, "", err
	}
	if !c.held(b, epoch) {
		return nil, "", errMoved // the leases lapsed while this one was claimed
	}
	return b, c.cl.node, nil
}

// route runs call where the sandbox's lease is: here (taking it if it is
// free or lapsed) or on its holder. A holder that does not answer is asked
// again (a node that died with the call in flight never answers) until it
// does or its lease lapses and this node takes over.
func (c *Coordinator) route(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	ttl := c.cl.TTL()
	giveUp := time.Now().Add(2*ttl + 30*time.Second)
	attempt := max(ttl, time.Second)
	pause := min(max(ttl/8, 10*time.Millisecond), time.Second)
	if call.ID == "" {
		call.ID = sandbox.NewID("call_")
	}
	for {
		b, owner, err := c.claim(ctx, sb.ID, true)
		switch {
		case errors.Is(err, errMoved):
		case err != nil:
			return nil, err
		case b != nil:
			v, err := c.exec(ctx, b, sb, call)
			if !errors.Is(err, errMoved) {
				return v, err
			}
		case call.From != "":
			return nil, errMoved
		default:
			fwd := call
			fwd.From = c.cl.node
			actx, cancel := context.WithTimeout(ctx, attempt)
			rep, err := c.cl.Forward(actx, owner, fwd)
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, cluster.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
				c.log.Debug("cluster: holder does not answer", "sandbox_id", sb.ID, "node", owner, "err", err)
			case err != nil:
				return nil, fmt.Errorf("forward %s to node %s: %w", call.Op, owner, err)
			case !rep.Moved:
				return replyResult(rep, owner)
			}
		}
		if time.Now().After(giveUp) {
			if owner != "" {
				return nil, sandbox.Errorf(sandbox.EConflict,
					"the node running this sandbox's agent (%s) does not answer; try again in %s", owner, ttl)
			}
			return nil, sandbox.Errorf(sandbox.EConflict, "the sandbox's runtime is moving between nodes; try again")
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// serveCall answers a call forwarded by another node, once per call ID.
func (c *Coordinator) serveCall(ctx context.Context, call cluster.Call) cluster.Reply {
	if c.ctx.Err() != nil || call.From == "" {
		return cluster.Reply{Moved: true}
	}
	if call.ID == "" {
		return c.runCall(ctx, call)
	}
	r := c.cl
	now := time.Now()
	r.mu.Lock()
	sc, again := r.calls[call.ID]
	if !again {
		for id, old := range r.calls {
			if !old.finished.IsZero() && now.Sub(old.finished) > keepAnswers {
				delete(r.calls, id)
			}
		}
		sc = &servedCall{done: make(chan struct{})}
		r.calls[call.ID] = sc
	}
	r.mu.Unlock()
	if again {
		select {
		case <-sc.done:
			return sc.rep
		case <-ctx.Done():
			return cluster.Reply{Error: &cluster.ReplyError{Message: "the first attempt of this call is still running"}}
		}
	}
	rep := c.runCall(ctx, call)
	r.mu.Lock()
	if rep.Moved {
		delete(r.calls, call.ID) // asked again, it may be this node's by then
	}
	sc.rep, sc.finished = rep, time.Now()
	r.mu.Unlock()
	close(sc.done)
	return rep
}

func (c *Coordinator) runCall(ctx context.Context, call cluster.Call) cluster.Reply {
	v, err := c.call(ctx, call)
	if errors.Is(err, errMoved) {
		return cluster.Reply{Moved: true}
	}
	if err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return cluster.Reply{Error: &cluster.ReplyError{Type: se.Type, Message: se.Message}}
		}
		c.log.Error("forwarded call failed", "op", call.Op, "sandbox_id", call.SandboxID, "from", call.From, "err", err)
		return cluster.Reply{Error: &cluster.ReplyError{Message: err.Error()}}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return cluster.Reply{Error: &cluster.ReplyError{Message: "encode answer: " + err.Error()}}
	}
	return cluster.Reply{Result: data}
}

// replyResult is the answer of a forwarded call as the holder gave it: the
// resource, or its error as the same *sandbox.Error, so the HTTP answer is
// the one the holder would have given.
func replyResult(r cluster.Reply, node string) (any, error) {
	if e := r.Error; e != nil {
		if e.Type == "" {
			return nil, fmt.Errorf("node %s: %s", node, e.Message)
		}
		return nil, &sandbox.Error{Type: e.Type, Message: e.Message}
	}
	return r.Result, nil
}

// callAs runs call and returns its answer as a T, whether it ran here or
// came back as JSON from the holder.
func callAs[T any](ctx context.Context, c *Coordinator, call cluster.Call) (T, error) {
	var zero T
	v, err := c.call(ctx, call)
	if err != nil {
		return zero, err
	}
	switch v := v.(type) {
	case T:
		return v, nil
	case json.RawMessage:
		var out T
		if err := json.Unmarshal(v, &out); err != nil {
			return zero, fmt.Errorf("decode the answer of a forwarded %s: %w", call.Op, err)
		}
		return out, nil
	}
	return zero, fmt.Errorf("%s answered %T", call.Op, v)
}

// idLocks serializes claims of the same sandbox on this node, so that a
// takeover is settled before anything else runs there.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

func (l *idLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	k := l.m[id]
	if k == nil {
		k = &idLock{}
		l.m[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}

// claimNew takes the lease of a sandbox about to be created, before it
// exists, so that no sweep of another node finds it without an owner. It
// returns the epoch to check the new box against.
func (c *Coordinator) claimNew(ctx context.Context, id string) (uint64, error) {
	epoch := c.cl.currentEpoch()
	cl, err := c.cl.Claim(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("take the lease of new sandbox %s: %w", id, err)
	}
	if cl.Owner != c.cl.node {
		return 0, fmt.Errorf("the lease of new sandbox %s is held by node %s", id, cl.Owner)
	}
	return epoch, nil
}

// held reports whether b, made in epoch, still holds its lease; a box made
// while the leases lapsed is retired at once.
func (c *Coordinator) held(b *box, epoch uint64) bool {
	if c.cl.currentEpoch() == epoch {
		return true
	}
	c.retire(b)
	return false
}
