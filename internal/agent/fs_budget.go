package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

const (
	// DefaultFSBudget is the memory the fs methods of all agents may hold
	// at once unless Config.FSBudget says otherwise: eight answers at
	// MaxFSMessage, or thousands of the source files agents usually read.
	DefaultFSBudget = 64 << 20

	// MinFSBudget is the smallest budget: what one agent may hold (see
	// agentFSShare), so that every request can be served.
	MinFSBudget = agentFSShare

	// agentFSShare is what one agent's fs requests may hold at once: an
	// answer at the limit and a write beside it. Without it, one agent
	// that sends large reads and leaves its stdin unread could hold the
	// whole budget until it is stopped as stalled.
	agentFSShare = 2 * MaxFSMessage
)

// FSBudget bounds the bytes that fs/read_text_file and fs/write_text_file
// hold at once, across every agent that shares it: an answer line from
// before it is allocated until it is written, the content of a write from
// before it is decoded until it is on disk. A request that finds the budget
// spent waits for it, as long as a write to its agent may stall
// (Config.StallTimeout), then is answered an error, so that a busy server
// slows agents' file requests rather than fail them, and a stuck one fails
// them rather than hold them. One budget is meant to be shared by every
// agent of a server; its methods are safe for concurrent use.
type FSBudget struct {
	size int64
	sem  *semaphore.Weighted

	mu         sync.Mutex
	held, peak int64 // now and at most so far: what tests check the bound by
}

// NewFSBudget returns a budget of size bytes; 0 or less means
// DefaultFSBudget, and less than MinFSBudget is raised to it.
func NewFSBudget(size int64) *FSBudget {
	if size <= 0 {
		size = DefaultFSBudget
	}
	size = max(size, MinFSBudget)
	return &FSBudget{size: size, sem: semaphore.NewWeighted(size)}
}

// Size is the bytes the budget allows at once.
func (b *FSBudget) Size() int64 { return b.size }

func (b *FSBudget) acquire(ctx context.Context, n int64) error {
	if err := b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	b.mu.Lock()
	b.held += n
	b.peak = max(b.peak, b.held)
	b.mu.Unlock()
	return nil
}

func (b *FSBudget) release(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	b.sem.Release(n)
}

// defaultFSBudget is shared by the connections started without a budget of
// their own, so that the bound holds across them too.
var defaultFSBudget = sync.OnceValue(func() *FSBudget { return NewFSBudget(DefaultFSBudget) })

// fsQuota is one connection's way into the budget: its own share first,
// then the server's.
type fsQuota struct {
	ctx    context.Context // ends when the connection does
	global *FSBudget
	agent  *semaphore.Weighted
	wait   time.Duration
}

func newFSQuota(ctx context.Context, global *FSBudget, wait time.Duration) *fsQuota {
	if global == nil {
		global = defaultFSBudget()
	}
	return &fsQuota{ctx: ctx, global: global, agent: semaphore.NewWeighted(agentFSShare), wait: wait}
}

func (q *fsQuota) context() context.Context {
	if q == nil {
		return context.Background()
	}
	return q.ctx
}

// acquire takes n bytes of the agent's share and of the budget, waiting
// for them at most q.wait. A nil quota bounds nothing.
func (q *fsQuota) acquire(n int64) (release func(), rpcErr *RPCError) {
	if q == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(q.ctx, q.wait)
	defer cancel()
	if err := q.agent.Acquire(ctx, n); err != nil {
		return nil, &RPCError{Code: codeInternal, Message: fmt.Sprintf(
			"server busy: this agent's file reads and writes already hold %d MiB; wait for their answers and try again", agentFSShare>>20)}
	}
	if err := q.global.acquire(ctx, n); err != nil {
		q.agent.Release(n)
		return nil, &RPCError{Code: codeInternal, Message: fmt.Sprintf(
			"server busy: the file reads and writes of all agents hold the server's %d MiB for them; try again", q.global.size>>20)}
	}
	return sync.OnceFunc(func() {
		q.global.release(n)
		q.agent.Release(n)
	}), nil
}
