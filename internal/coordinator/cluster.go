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

// leased is the placement of a node of a cluster (see placement.go): a
// sandbox's runtime is on the node that holds its lease. This node claims
// a sandbox's lease before it runs anything for it (taking it over and
// settling what the last holder left open if it was free or lapsed),
// forwards a call to the holder otherwise, answers the calls forwarded to
// it, renews its leases and sweeps the sandboxes whose node went away
// (cluster_leases.go).
type leased struct {
	c         *Coordinator
	cl        cluster.Cluster
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

func (l *leased) currentEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// startLeased makes c a node of cl: its placement is leased, its store
// writes under the leases (leasedStore), and it serves forwarded calls and
// starts the lease and sweep loops.
func startLeased(c *Coordinator, cl cluster.Cluster) error {
	l := &leased{c: c, cl: cl, node: cl.Node(), stopServe: func() {}, calls: map[string]*servedCall{}}
	// Both before the first forwarded call can arrive.
	c.place = l
	c.store = leasedStore{Store: c.store, l: l}
	stop, err := cl.Serve(l.serveCall)
	if err != nil {
		return fmt.Errorf("serve forwarded calls: %w", err)
	}
	l.stopServe = stop
	c.loop(l.leaseLoop)
	c.loop(l.sweepLoop)
	return nil
}

func (l *leased) stop() { l.stopServe() }

// run runs call where the sandbox's lease is (see route). A deleted
// sandbox has no runtime left to hold, so any node answers for it.
func (l *leased) run(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	if sb.Status == sandbox.StatusDeleted {
		return l.c.runHere(ctx, sb, call)
	}
	return l.route(ctx, sb, call)
}

// recover settles only the sandboxes whose node went away (this node's
// earlier run among them), as the sweep does: the others are the live
// nodes'.
func (l *leased) recover(ctx context.Context) error { return l.sweep(ctx) }

func (l *leased) release(ctx context.Context, id string) error { return l.cl.Release(ctx, id) }

// queued finds a turn queued on another node in the sandbox's
// current_turn, where it is until it starts.
func (l *leased) queued(ctx context.Context, id, turnID string) (sandbox.Turn, bool) {
	if sb, err := l.c.store.Sandbox(ctx, id); err == nil && sb.CurrentTurn != nil && sb.CurrentTurn.ID == turnID {
		return *sb.CurrentTurn, true
	}
	return sandbox.Turn{}, false
}

// probeAny is none: the sandboxes this node does not run are other nodes'
// to write.
func (*leased) probeAny(context.Context) string { return "" }

// leasedStore is the store as a node of a cluster writes it. An append
// the store refuses because this node no longer holds the sandbox's lease
// (ErrFenced: it lapsed, or another node took the sandbox over while this
// one was paused or cut off) retires the sandbox's runtime here: another
// node may be running it now. The store refuses every later append of
// this node to the sandbox until it claims the lease again, so whatever
// the runtime does before it is retired writes nothing.
type leasedStore struct {
	sandbox.Store
	l *leased
}

func (s leasedStore) Append(ctx context.Context, id string, events []*sandbox.Event, mutate func(*sandbox.State) error) error {
	err := s.Store.Append(ctx, id, events, mutate)
	if errors.Is(err, sandbox.ErrFenced) {
		s.l.fenced(id)
	}
	return err
}

// fenced retires this node's runtime of a sandbox whose lease it lost. The
// append that found out may be running on the box's own goroutine, which
// retiring waits for, so it is retired from another one. A claim of the
// sandbox by this node meanwhile finds no box and makes a new one, with
// the new lease; the old box's abandon is queued long before this node
// could win the lease back (a TTL of the other node's at least).
func (l *leased) fenced(id string) {
	b := l.c.existingBox(id)
	if b == nil {
		return
	}
	l.c.log.Warn("cluster: this node lost the lease of a sandbox; stopping its agent without writing", "node", l.node, "sandbox_id", id)
	go l.c.retire(b)
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
func (l *leased) claim(ctx context.Context, id string, makeBox bool) (*box, string, error) {
	c := l.c
	unlock := l.locks.lock(id)
	defer unlock()
	if b := c.existingBox(id); b != nil {
		return b, l.node, nil
	}
	epoch := l.currentEpoch()
	cl, err := l.cl.Claim(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if cl.Owner != l.node {
		return nil, cl.Owner, nil
	}
	if cl.Taken {
		c.log.Info("cluster: took over sandbox", "node", l.node, "sandbox_id", id)
		if err := c.recoverOne(ctx, id, nodeLost); err != nil {
			// Let go, so that whoever claims it next settles it.
			if rerr := l.cl.Release(context.WithoutCancel(ctx), id); rerr != nil {
				c.log.Warn("cluster: release after a failed settle", "sandbox_id", id, "err", rerr)
			}
			return nil, "", fmt.Errorf("settle sandbox %s: %w", id, err)
		}
	}
	if !makeBox {
		return nil, l.node, nil
	}
	b, err := c.box(id)
	if err != nil {
		return nil, "", err
	}
	if !l.held(b, epoch) {
		return nil, "", errMoved // the leases lapsed while this one was claimed
	}
	return b, l.node, nil
}

// route runs call where the sandbox's lease is: here (taking it if it is
// free or lapsed) or on its holder. A holder that does not answer is asked
// again (a node that died with the call in flight never answers) until it
// does or its lease lapses and this node takes over.
func (l *leased) route(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	c := l.c
	ttl := l.cl.TTL()
	giveUp := time.Now().Add(2*ttl + 30*time.Second)
	attempt := max(ttl, time.Second)
	pause := min(max(ttl/8, 10*time.Millisecond), time.Second)
	if call.ID == "" {
		call.ID = sandbox.NewID("call_")
	}
	for {
		b, owner, err := l.claim(ctx, sb.ID, true)
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
			fwd.From = l.node
			actx, cancel := context.WithTimeout(ctx, attempt)
			rep, err := l.cl.Forward(actx, owner, fwd)
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
func (l *leased) serveCall(ctx context.Context, call cluster.Call) cluster.Reply {
	if l.c.ctx.Err() != nil || call.From == "" {
		return cluster.Reply{Moved: true}
	}
	if call.ID == "" {
		return l.runCall(ctx, call)
	}
	now := time.Now()
	l.mu.Lock()
	sc, again := l.calls[call.ID]
	if !again {
		for id, old := range l.calls {
			if !old.finished.IsZero() && now.Sub(old.finished) > keepAnswers {
				delete(l.calls, id)
			}
		}
		sc = &servedCall{done: make(chan struct{})}
		l.calls[call.ID] = sc
	}
	l.mu.Unlock()
	if again {
		select {
		case <-sc.done:
			return sc.rep
		case <-ctx.Done():
			return cluster.Reply{Error: &cluster.ReplyError{Message: "the first attempt of this call is still running"}}
		}
	}
	rep := l.runCall(ctx, call)
	l.mu.Lock()
	if rep.Moved {
		delete(l.calls, call.ID) // asked again, it may be this node's by then
	}
	sc.rep, sc.finished = rep, time.Now()
	l.mu.Unlock()
	close(sc.done)
	return rep
}

func (l *leased) runCall(ctx context.Context, call cluster.Call) cluster.Reply {
	c := l.c
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
func (l *leased) claimNew(ctx context.Context, id string) (uint64, error) {
	epoch := l.currentEpoch()
	cl, err := l.cl.Claim(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("take the lease of new sandbox %s: %w", id, err)
	}
	if cl.Owner != l.node {
		return 0, fmt.Errorf("the lease of new sandbox %s is held by node %s", id, cl.Owner)
	}
	return epoch, nil
}

// held reports whether b, made in epoch, still holds its lease; a box made
// while the leases lapsed is retired at once.
func (l *leased) held(b *box, epoch uint64) bool {
	if l.currentEpoch() == epoch {
		return true
	}
	l.c.retire(b)
	return false
}
