package coordinator

import "sync"

// slots bounds the agents that run at once (Config.MaxAgents). A box holds
// a slot from the moment its boot is granted until its agent has exited
// (Conn.Close returned) or its boot failed, so at no moment do more agent
// processes exist than there are slots.
//
// A turn that needs an agent when every slot is held waits in a queue, in
// the order the turns came; it is never refused. To make room the least
// recently used idle agent is asked to stop (evicted); a slot that frees
// goes to the first waiter. A boot at create, which only warms an agent up,
// takes a free slot or none: it neither waits nor evicts.
//
// The manager never blocks a box: it tells boxes through channels of one
// element that their actors read (grant, evict), and each box reports its
// own changes (idle, busy, release) from its own goroutine. An eviction is
// a request: the box confirms it when it gets to it, and one that became
// busy meanwhile keeps its agent.
type slots struct {
	max int

	mu       sync.Mutex
	holders  map[*box]bool
	idle     map[*box]uint64 // holders whose agent is idle, with when it became so (a sequence)
	evicting map[*box]bool   // idle holders asked to stop, not confirmed yet
	stopping map[*box]bool   // holders that confirmed an eviction and are stopping
	waiting  []*box          // boxes whose turn waits for a slot, first come first
	seq      uint64
}

func newSlots(max int) *slots {
	return &slots{
		max:      max,
		holders:  map[*box]bool{},
		idle:     map[*box]uint64{},
		evicting: map[*box]bool{},
		stopping: map[*box]bool{},
	}
}

// acquire asks for a slot for b's boot. It is granted at once when one is
// free and no turn waits. Otherwise, for a turn (queue true), b joins the
// queue, an idle agent may be asked to stop, and the slot arrives later on
// b.slot.granted; for a create it is simply not granted.
func (s *slots) acquire(b *box, queue bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders[b] {
		return true
	}
	if len(s.holders) < s.max && len(s.waiting) == 0 {
		s.holders[b] = true
		return true
	}
	if !queue {
		return false
	}
	for _, w := range s.waiting {
		if w == b {
			return false
		}
	}
	s.waiting = append(s.waiting, b)
	s.schedule()
	return false
}

// withdraw takes b out of the queue: its turn no longer needs an agent.
func (s *slots) withdraw(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == b {
			s.waiting = append(s.waiting[:i:i], s.waiting[i+1:]...)
			break
		}
	}
}

// release gives b's slot back: its agent is gone (or never started).
func (s *slots) release(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.holders, b)
	delete(s.idle, b)
	delete(s.evicting, b)
	delete(s.stopping, b)
	s.schedule()
}

// setIdle records that b's agent runs with nothing to do; it may be
// evicted from now on, the longest idle first.
func (s *slots) setIdle(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.holders[b] {
		return
	}
	s.seq++
	s.idle[b] = s.seq
	s.schedule()
}

// setBusy records that b's agent has work again. An eviction asked of it
// and not yet confirmed is withdrawn, and another idle agent is asked.
func (s *slots) setBusy(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.idle, b)
	delete(s.evicting, b)
	s.schedule()
}

// confirmEvict is b's answer to an eviction request, on its own goroutine:
// true when b is to stop its agent now. False when b became busy since, or
// when enough agents are stopping already for the turns that wait.
func (s *slots) confirmEvict(b *box) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.evicting[b] {
		return false
	}
	delete(s.evicting, b)
	if len(s.waiting) <= len(s.stopping) {
		return false
	}
	delete(s.idle, b)
	s.stopping[b] = true
	return true
}

// schedule grants free slots to the queue in order, then asks as many idle
// agents to stop as there are waiting turns not yet covered by a stop under
// way, the least recently used first. s.mu is held.
func (s *slots) schedule() {
	for len(s.waiting) > 0 && len(s.holders) < s.max {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.holders[w] = true
		signal(w.slot.granted)
	}
	for need := len(s.waiting) - len(s.evicting) - len(s.stopping); need > 0; need-- {
		var victim *box
		for b, at := range s.idle {
			if !s.evicting[b] && (victim == nil || at < s.idle[victim]) {
				victim = b
			}
		}
		if victim == nil {
			return
		}
		s.evicting[victim] = true
		signal(victim.slot.evict)
	}
}

// signal wakes a box without waiting: the channel holds one element, and
// one pending wake-up says all there is to say.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
