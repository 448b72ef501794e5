package agent

import (
	"slices"
	"time"
)

// Close stops the agent the way ACP asks: while a prompt runs it sends
// session/cancel (unless Cancel already did), answers every permission
// request still waiting with a cancelled outcome, and gives the agent the
// stop grace to answer the prompt; then it closes the agent's stdin, kills
// its process group if it has not exited within another stop grace, and
// waits until the connection has ended. What the agent sends meanwhile is
// not delivered. Close is safe to call more than once and from several
// goroutines.
func (c *Conn) Close() error {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.settle()
		c.closeStdin()
		t := time.NewTimer(c.grace)
		defer t.Stop()
		select {
		case <-c.procExited:
		case <-t.C:
			c.log.Info("agent did not exit after its input closed; killing it")
			c.proc.kill()
		}
	})
	<-c.done
	return nil
}

// abort ends the connection at once, without the grace Close gives: for an
// agent that failed to boot there is nothing to wait for.
func (c *Conn) abort() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.closeStdin()
		c.proc.kill()
	})
	<-c.done
}

// settle tells the agent that its work is over before its input closes. An
// agent whose stdin closes in the middle of a prompt cannot tell a stop from
// a client that went away, and may go on talking to its model until it is
// killed. The writes run aside: an agent that does not read its input must
// not hold the stop beyond the grace, and closing stdin after it ends them.
func (c *Conn) settle() {
	c.mu.Lock()
	var answered <-chan struct{}
	if c.prompting {
		answered = c.promptDone
	}
	cancel := c.prompting && !c.cancelSent
	c.cancelSent = c.cancelSent || cancel
	// After stopping is closed, handleRequest answers new permission
	// requests itself, so these are the last ones the caller could hold.
	asks := make([]string, 0, len(c.asks))
	for k := range c.asks {
		asks = append(asks, k)
	}
	clear(c.asks)
	c.mu.Unlock()
	slices.Sort(asks)
	if answered == nil && len(asks) == 0 {
		return
	}
	select {
	case <-c.ended:
		return
	default:
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if cancel {
			if err := c.cancelNotice(); err != nil {
				c.log.Debug("session/cancel at stop", "err", err)
				return
			}
		}
		for _, id := range asks {
			c.reply([]byte(id), PermissionCancelled(), nil)
		}
	}()
	t := time.NewTimer(c.grace)
	defer t.Stop()
	for sent != nil || answered != nil {
		select {
		case <-sent:
			sent = nil
		case <-answered:
			answered = nil
		case <-c.ended:
			return
		case <-t.C:
			c.log.Info("agent did not answer the cancel of its prompt in time; closing its input", "grace", c.grace)
			return
		}
	}
}
