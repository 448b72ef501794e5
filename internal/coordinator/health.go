package coordinator

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// storeHealth is what the coordinator knows of the store's writes: whether
// the last one went through and, while they fail, why. One refused write
// is enough to say the store cannot take writes, and one that goes through
// that it can again. A full disk or a server that is gone refuses the
// next write as surely as the last; a disk with room for small commits
// only flips between the two, and so does what this says, which is the
// truth of the moment either way.
type storeHealth struct {
	mu      sync.Mutex
	err     error  // the store's last error while writes fail; nil while they go through
	reason  string // err in words for people: disk full, unreachable…
	target  string // the sandbox of the last refused write, the first to probe with
	probing bool   // a probe loop runs
}

// noteWrite tells the health of the store from the outcome of one write of
// sandbox id (empty for a create, whose sandbox does not exist yet). A
// refusal of the write itself (an unknown sandbox, a mutate's error) says
// nothing about the store and is ignored.
func (c *Coordinator) noteWrite(id string, err error) {
	if err != nil && !storeFault(err) {
		return
	}
	h := &c.health
	obs := c.cfg.Observer
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if h.err != nil {
			c.log.Info("the event store takes writes again", "was", h.reason)
			h.err, h.reason = nil, ""
			obs.StoreHealthy(true)
		}
		return
	}
	obs.AppendFailed()
	if id != "" {
		h.target = id
	}
	h.reason = storeReason(err)
	if h.err == nil {
		c.log.Error("the event store cannot take writes; writes wait in memory and requests that write are answered 503 until it can",
			"reason", h.reason, "err", err)
		obs.StoreHealthy(false)
	}
	h.err = err
	if !h.probing && c.ctx.Err() == nil {
		h.probing = true
		c.loop(c.probe)
	}
}

// Writable returns nil while the store takes writes, and otherwise an
// unavailable error that says why. Every request that writes asks it
// first, and /readyz asks it too.
func (c *Coordinator) Writable() error {
	// A store that knows its server is gone (natsstore) says so before
	// any write of this node fails: a request is refused at once rather
	// than after the store's timeout.
	if r, ok := c.cfg.Store.(interface{ Unreachable() error }); ok {
		if err := r.Unreachable(); err != nil {
			return err
		}
	}
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return unavailable(h.err)
}

// unavailable is the error of a request whose write the store refused.
func unavailable(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.Type == sandbox.EUnavailable {
		return se
	}
	return unavailableBecause(storeReason(err))
}

func unavailableBecause(reason string) error {
	return sandbox.Errorf(sandbox.EUnavailable,
		"the event store cannot take writes (%s); reads keep working from what is stored; try again once it is back", reason)
}

// storeFault reports whether err is the store failing to write, as opposed
// to a write refused for what it is (an unknown sandbox, a mutate's error,
// an invalid event, the caller giving up), which no retry would change.
func storeFault(err error) bool {
	// A fenced append is no fault of the store: another node holds the
	// sandbox now, and this node's runtime of it is retired, not retried.
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrFenced) {
		return false
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se.Type == sandbox.EUnavailable
	}
	return true
}

// storeReason says in a few words why the store refused a write. It never
// repeats the error itself, which names files of the data dir; the server
// log has it.
func storeReason(err error) string {
	var se *sandbox.Error
	var ne net.Error
	switch {
	case errors.As(err, &se) && se.Type == sandbox.EUnavailable:
		return se.Message
	case errors.Is(err, syscall.ENOSPC):
		return "disk full: no space left on device"
	case errors.Is(err, syscall.EDQUOT):
		return "disk full: the disk quota is exhausted"
	case errors.Is(err, syscall.EROFS):
		return "its file system is read-only"
	case errors.Is(err, syscall.EIO):
		return "its disk reported an I/O error"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return "store unreachable: it did not answer"
	}
	return "the store failed the write; the server log has its error"
}

// backoff is the wait before attempt n+1 of a refused write: doubling from
// StoreRetry up to StoreRetryMax, and spread over the upper half of that, so
// that the boxes of many sandboxes refused by the same outage do not all
// come back in the same millisecond.
func (c *Coordinator) backoff(attempt int) time.Duration {
	d := c.cfg.StoreRetryMax
	if attempt < 30 {
		d = min(c.cfg.StoreRetry<<attempt, d)
	}
	return d/2 + rand.N(d/2+1)
}

// probe tries the store while it refuses writes, until it takes one. Boxes
// with writes waiting retry those themselves; the probe is for the other
// case, a refused create or a turn answered 503, which leave nothing
// waiting that could tell the store is back. It writes nothing: an append
// of no event whose mutate changes nothing, to a sandbox of this node.
func (c *Coordinator) probe(ctx context.Context) {
	h := &c.health
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(c.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			h.mu.Lock()
			h.probing = false
			h.mu.Unlock()
			return
		case <-t.C:
		}
		h.mu.Lock()
		if h.err == nil {
			h.probing = false
			h.mu.Unlock()
			return
		}
		target := h.target
		h.mu.Unlock()
		if c.stalled.Load() > 0 {
			continue // their retries are the probe
		}
		id := c.probeTarget(ctx, target)
		if id == "" {
			// Nothing to write to (an empty store whose first create was
			// refused): the next request's write is the probe.
			c.log.Info("no sandbox to probe the event store with; the next write tells whether it is back")
			c.noteWrite("", nil)
			continue
		}
		err := c.store.Append(ctx, id, nil, func(*sandbox.State) error { return nil })
		if err != nil && !storeFault(err) {
			h.mu.Lock()
			if h.target == id {
				h.target = "" // gone since; try another
			}
			h.mu.Unlock()
			continue
		}
		c.noteWrite(id, err)
	}
}

// probeTarget picks the sandbox a probe writes to: the one whose write was
// refused, else one this node runs, else (alone on the store) any: see
// placement.probeAny.
func (c *Coordinator) probeTarget(ctx context.Context, last string) string {
	if last != "" {
		if _, err := c.store.Sandbox(ctx, last); err == nil {
			return last
		}
	}
	c.mu.Lock()
	for id := range c.boxes {
		c.mu.Unlock()
		return id
	}
	c.mu.Unlock()
	return c.place.probeAny(ctx)
}
