package natsstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Fencing keeps a node whose lease lapsed from writing a sandbox that
// another node took over, however late its writes arrive (a paused
// process, a slow network). See doc.go, "Fencing", for the argument.
//
// A node that takes a sandbox's lease puts up a fence: one message on the
// sandbox's fence subject, beside its log in the same stream. Its sequence
// is the node's epoch, and the node records it as the owner in the
// sandbox's state. From then on:
//
//   - every publish of an append expects the last sequence of the log and
//     the fence subject together (one wildcard covers both) to be what the
//     writer last saw, so a fence put up since refuses it; the events
//     after the first expect the fence subject itself to be unchanged (on a
//     single server, where they are pipelined) or ride in one atomic batch
//     with the first (on a replicated stream);
//   - every key-value write of an append (its turns and approvals, then its
//     state) expects the state key to be at the revision the append read,
//     and the takeover moves that revision, so writes of the earlier holder
//     are refused too;
//   - an append by a process whose hold is known lost (its lease lapsed, a
//     newer fence was seen) is refused before anything is sent, and so is
//     one by a node that never held the lease of a fenced sandbox.
//
// The leases themselves are not the store's: natscluster keeps them, and
// Fences is the one seam between the two. The cluster puts up a fence
// with Fences.Hold when it takes a lease, drops it with Lose and LoseAll
// when it lets go of one or all of them, and gives the store, once, the
// hook that says whether its leases hold now.

// Fences is the store's side of a cluster's leases: the fences that the
// node holding a sandbox's lease puts up on the sandbox's log, and that
// every append of this process to the sandbox is checked against. Get it
// with Store.Fences.
type Fences struct{ s *Store }

// Fences makes this process write as a node of a cluster and returns the
// fences for its leases. held reports whether the node's leases hold now:
// while they do not, every append to a sandbox this process holds is
// refused before it is sent. From this call on, a sandbox that any node
// fenced is refused to this process unless it holds the sandbox's fence;
// before it (a store of no cluster) the store writes unfenced. A later
// call replaces held.
func (s *Store) Fences(held func() bool) *Fences {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases = held
	return &Fences{s: s}
}

// Hold puts up this process's fence on the log of sandbox id, whose lease
// the caller just took, and returns its epoch: from then on, appends of
// any earlier holder are refused, and this process's are checked against
// the epoch. who is the fence's body, for people reading the stream.
func (f *Fences) Hold(ctx context.Context, id string, who []byte) (epoch uint64, err error) {
	return f.s.hold(ctx, id, who)
}

// Holding reports whether this process holds the log of sandbox id now:
// it put up a fence that it has not lost since.
func (f *Fences) Holding(id string) bool { return f.s.holding(id) }

// Lose ends this process's hold of sandbox id, if any: it let go of the
// lease, and its appends to the sandbox are refused until the next Hold.
func (f *Fences) Lose(id string) { f.s.loseHold(id, 0) }

// LoseAll ends every hold of this process: the node's leases lapsed, or
// it left the cluster.
func (f *Fences) LoseAll() { f.s.loseHolds() }

// FencedError is an append refused because this process does not hold the
// sandbox's log (any more): another node put up a newer fence, or this
// node's leases lapsed. It matches sandbox.ErrFenced with errors.Is.
type FencedError struct {
	SandboxID string
	// Epoch is this process's fence of the sandbox, 0 once its hold was
	// lost here.
	Epoch uint64
	// Holder is the newer fence found in the way, 0 when the hold was lost
	// here (a lapse) rather than taken.
	Holder uint64
}

func (e *FencedError) Error() string {
	if e.Holder != 0 {
		return fmt.Sprintf("append to %s: the log was taken over (fence %d, this node's %d): %v", e.SandboxID, e.Holder, e.Epoch, sandbox.ErrFenced)
	}
	return fmt.Sprintf("append to %s: this node's hold on the log is lost: %v", e.SandboxID, sandbox.ErrFenced)
}

func (e *FencedError) Unwrap() error { return sandbox.ErrFenced }

// As lets a request answered with a fenced append say unavailable, not
// internal: the sandbox's runtime moves (to another node, or back here
// once this node's leases hold again), and the request asked again finds
// it there.
func (e *FencedError) As(target any) bool {
	se, ok := target.(**sandbox.Error)
	if ok {
		*se = sandbox.Errorf(sandbox.EUnavailable, "this node no longer runs sandbox %s (its lease lapsed or moved); try again shortly", e.SandboxID)
	}
	return ok
}

// hold puts up this process's fence on the log of sandbox id and returns
// its epoch. From its sequence on, appends of an earlier holder are
// refused by the stream; the state is rewritten with the new owner, which
// refuses that holder's key-value writes, after folding in whatever it
// left beyond the state. A sandbox not created yet gets its owner from
// Create. who is the fence's body, for people reading the stream.
func (s *Store) hold(ctx context.Context, id string, who []byte) (_ uint64, err error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	if err := s.refuse(true); err != nil {
		return 0, err
	}
	// Its requests all write: they are given up a little after NATS is
	// found unreachable (see reach.go).
	caller := ctx
	ctx, cut := s.cutOffWrites(ctx)
	defer cut()
	defer func() { err = s.classify(caller, ctx, err, true) }()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	epoch, err := s.putFence(ctx, id, who)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.holds[id] = epoch
	s.mu.Unlock()
	e, err := s.lookup(ctx, id)
	if sandbox.IsType(err, sandbox.ENotFound) {
		return epoch, nil
	}
	if err != nil {
		return 0, err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	s.invalidate(e)
	_, _, err = s.commitMarks(ctx, e, "take over", func(_ *sandbox.State, owner *uint64) (bool, error) {
		*owner = epoch
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	return epoch, nil
}

// putFence publishes a fence on the fence subject of sandbox id. It too
// expects the last sequence of both subjects, so that on a replicated
// stream it is ordered with the appends in flight rather than slipped in
// among them; one that loses that race looks again.
func (s *Store) putFence(ctx context.Context, id string, who []byte) (uint64, error) {
	for attempt := 1; ; attempt++ {
		tip, fence, err := s.lastBoth(ctx, id)
		if err != nil {
			return 0, err
		}
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.fenceSubject(id), Data: who},
			jetstream.WithExpectStream(s.streamName), jetstream.WithRetryAttempts(0),
			jetstream.WithExpectLastSequenceForSubject(max(tip, fence), s.bothSubjects(id)))
		if err == nil {
			return ack.Sequence, nil
		}
		if !isWrongLastSeq(err) || attempt == maxConflicts {
			return 0, fmt.Errorf("sandbox %s: put up a fence: %w", id, err)
		}
		Backoff(ctx, attempt)
	}
}

// holdOf returns this process's epoch on the log of sandbox id: 0 for a
// sandbox it never held (written unfenced, as without a cluster), and a
// FencedError when its hold is lost or its cluster's leases lapsed (the
// hook given to Fences says so).
func (s *Store) holdOf(id string) (uint64, error) {
	s.mu.Lock()
	epoch, ok := s.holds[id]
	leases := s.leases
	s.mu.Unlock()
	if !ok {
		return 0, nil
	}
	if epoch == 0 {
		return 0, &FencedError{SandboxID: id}
	}
	if leases != nil && !leases() {
		s.loseHold(id, epoch)
		return 0, &FencedError{SandboxID: id, Epoch: epoch}
	}
	return epoch, nil
}

// holding reports whether this process holds the log of sandbox id now.
func (s *Store) holding(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds[id] != 0
}

// checkHold refuses an append of epoch when the state or the fence subject
// name another holder. A fence subject found empty is one whose fence the
// stream's age limit removed: the state's owner then says who holds it. A
// process of a cluster that holds no lease of the sandbox (epoch 0) may
// not write it once any node has fenced it; without a cluster, writes are
// unfenced.
func (s *Store) checkHold(id string, epoch uint64, v view) error {
	if epoch == 0 {
		s.mu.Lock()
		inCluster := s.leases != nil
		s.mu.Unlock()
		if inCluster && (v.fence != 0 || v.owner != 0) {
			return &FencedError{SandboxID: id, Holder: max(v.fence, v.owner)}
		}
		return nil
	}
	if v.fence != 0 && v.fence < epoch {
		// This process's own fence is at epoch: a read that shows an
		// older one came from a replica that has not caught up. Read
		// again rather than refuse an append this process may make.
		return fmt.Errorf("sandbox %s: fence %d read, this process's is %d: %w", id, v.fence, epoch, errMoved)
	}
	if v.fence != 0 && v.fence != epoch {
		return &FencedError{SandboxID: id, Epoch: epoch, Holder: v.fence}
	}
	if v.owner != 0 && v.owner < epoch {
		// Likewise a state read before this process's takeover wrote it.
		return fmt.Errorf("sandbox %s: owner %d read, this process's epoch is %d: %w", id, v.owner, epoch, errMoved)
	}
	if v.owner != 0 && v.owner != epoch {
		return &FencedError{SandboxID: id, Epoch: epoch, Holder: v.owner}
	}
	return nil
}

// loseHold ends this process's hold of epoch on sandbox id (any epoch,
// when 0): its appends are refused here from now on, until the next hold.
func (s *Store) loseHold(id string, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.holds[id]; ok && (epoch == 0 || cur == epoch) {
		s.holds[id] = 0
	}
}

// loseHolds ends every hold of this process: its leases lapsed.
func (s *Store) loseHolds() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.holds {
		s.holds[id] = 0
	}
}

// lost records a refusal: a FencedError ends the hold it names.
func (s *Store) lost(err error) error {
	var fe *FencedError
	if errors.As(err, &fe) {
		s.loseHold(fe.SandboxID, fe.Epoch)
	}
	return err
}
