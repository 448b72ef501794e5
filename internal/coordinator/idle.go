package coordinator

import (
	"fmt"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// An agent that has had nothing to do for Config.AgentIdleTimeout is
// stopped: an idle Node adapter holds 150-300 MB for nothing. Its sandbox
// shows stopped, and the next turn boots it again, loading its session
// (session/load) where the agent can. Agents also stop, the least recently
// used idle one first, when every slot (Config.MaxAgents) is held and a
// turn needs one (see slots).

// agentSlot is the box's side of the slot manager: whether it holds a
// slot or waits for one, whether its agent is idle, and the timer and
// channels the actor selects on.
type agentSlot struct {
	held      bool          // holds a slot: booting, running or stopping
	waiting   bool          // a turn waits in the slot queue
	idle      bool          // the agent runs with nothing to do
	idleTimer *time.Timer   // stops the agent after Config.AgentIdleTimeout
	granted   chan struct{} // the slot manager granted the waiting turn a slot
	evict     chan struct{} // the slot manager asks this idle agent to stop
}

func newAgentSlot() agentSlot {
	return agentSlot{idleTimer: stoppedTimer(), granted: make(chan struct{}, 1), evict: make(chan struct{}, 1)}
}

// settleIdle keeps the idle timer and the slot manager in step with the
// box; the box's loop runs it after every step. An agent is idle when it
// runs and no turn is open (approvals only exist within a turn).
func (b *box) settleIdle() {
	idle := b.conn != nil && b.turn == nil && !b.deleted
	switch {
	case idle && !b.slot.idle:
		b.slot.idle = true
		b.c.slots.setIdle(b)
		if d := b.c.cfg.AgentIdleTimeout; d > 0 {
			b.slot.idleTimer.Reset(d)
		}
	case !idle && b.slot.idle:
		b.slot.idle = false
		b.slot.idleTimer.Stop()
		if b.conn != nil {
			b.c.slots.setBusy(b)
		}
	}
	if b.slot.waiting && !b.needsAgent() {
		// The turn that waited for a slot ended (canceled) or the
		// sandbox went away: nobody needs the slot any more.
		b.slot.waiting = false
		b.c.slots.withdraw(b)
	}
}

// needsAgent reports whether a turn waits for an agent that is not booting.
func (b *box) needsAgent() bool {
	return b.turn != nil && b.conn == nil && !b.booting && !b.deleted
}

// idleExpired stops an agent that stayed idle for the whole timeout.
func (b *box) idleExpired() {
	if !b.slot.idle {
		return // a turn came first
	}
	b.stopIdle(fmt.Sprintf("the agent was idle for %s and was stopped; it starts again with the next turn", b.c.cfg.AgentIdleTimeout))
}

// evicted answers the slot manager's request to stop an idle agent so that
// a waiting turn of another sandbox gets its slot.
func (b *box) evicted() {
	if !b.slot.idle || !b.c.slots.confirmEvict(b) {
		return
	}
	b.stopIdle(fmt.Sprintf("the agent was stopped to free its slot for another sandbox (at most %d agents run at once); it starts again with the next turn", b.c.cfg.MaxAgents))
}

func (b *box) stopIdle(detail string) {
	b.log().Info("stopping an idle agent", "why", detail)
	b.stopAgent()
	b.setStatus(sandbox.StatusStopped, detail)
}

// slotGranted takes the slot the manager handed to this box's waiting turn.
func (b *box) slotGranted() {
	if b.slot.held {
		return // acquire got it first
	}
	b.slot.held, b.slot.waiting = true, false
	if b.needsAgent() {
		b.boot(true)
		return
	}
	b.releaseSlot()
}

// releaseSlot gives the box's slot back once its agent is gone.
func (b *box) releaseSlot() {
	if !b.slot.held {
		return
	}
	b.slot.held = false
	b.c.slots.release(b)
}

// waitForSlot says, on the sandbox, why its turn does not start yet.
func (b *box) waitForSlot() {
	if b.slot.waiting {
		return
	}
	b.slot.waiting = true
	b.log().Info("turn waits for a free agent slot", "max_agents", b.c.cfg.MaxAgents)
	b.setStatus(sandbox.StatusStopped, fmt.Sprintf("the turn waits for a free agent slot: all %d agents are busy", b.c.cfg.MaxAgents))
}
