package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Forwarded calls travel by NATS request and reply: node N subscribes to
// <CallPrefix>.N.call, and the sender waits for the one reply. No queue
// group: a node name belongs to one live process.

func (c *Cluster) callSubject(node string) string { return c.callPrefix + "." + node + ".call" }

// Forward sends call to node by request and reply. See cluster.Cluster.
func (c *Cluster) Forward(ctx context.Context, node string, call cluster.Call) (cluster.Reply, error) {
	if !validToken(node) {
		return cluster.Reply{}, fmt.Errorf("cluster: invalid node name %q", node)
	}
	data, err := json.Marshal(call)
	if err != nil {
		return cluster.Reply{}, err
	}
	// A turn's attachments travel in the call: past the server's payload
	// limit NATS would refuse it, so say which limit.
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		return cluster.Reply{}, sandbox.Errorf(sandbox.EPayloadTooLarge,
			"the request takes %d bytes on its way to the node running this sandbox, past NATS's limit of %d (max_payload); send smaller attachments, or raise max_payload on the NATS servers", len(data), limit)
	}
	// A call sent while NATS is known unreachable would wait for its
	// timeout; it was not sent, so the caller may answer unavailable.
	if err := c.store.Unreachable(); err != nil {
		return cluster.Reply{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.callTimeout)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, c.callSubject(node), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return cluster.Reply{}, fmt.Errorf("cluster: node %s: %w", node, cluster.ErrUnreachable)
	}
	if err != nil {
		return cluster.Reply{}, fmt.Errorf("cluster: call node %s: %w", node, err)
	}
	var rep cluster.Reply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return cluster.Reply{}, fmt.Errorf("cluster: undecodable reply from node %s: %w", node, err)
	}
	return rep, nil
}

// Serve answers forwarded calls. See cluster.Cluster.
func (c *Cluster) Serve(handle func(ctx context.Context, call cluster.Call) cluster.Reply) (func(), error) {
	srv := &server{handle: handle, timeout: c.callTimeout, log: c.log, nc: c.nc}
	sub, err := c.nc.Subscribe(c.callSubject(c.node), srv.serve)
	if err != nil {
		return nil, fmt.Errorf("cluster: subscribe to %s: %w", c.callSubject(c.node), err)
	}
	srv.sub = sub
	// Only once the server has the subscription do calls reach this node.
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("cluster: subscribe to %s: %w", c.callSubject(c.node), err)
	}
	c.mu.Lock()
	c.serving = srv
	c.mu.Unlock()
	return srv.stop, nil
}

// server runs the handler of forwarded calls.
type server struct {
	handle  func(ctx context.Context, call cluster.Call) cluster.Reply
	timeout time.Duration
	log     *slog.Logger
	sub     *nats.Subscription
	nc      *nats.Conn

	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

func (s *server) serve(msg *nats.Msg) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		// A call that was on its way when serving stopped: the sender
		// looks for the sandbox's holder again.
		if data, err := json.Marshal(cluster.Reply{Moved: true}); err == nil {
			_ = msg.Respond(data)
		}
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	// Calls wait on sandbox runtimes; one slow call must not hold the
	// subscription's other calls behind it.
	go func() {
		defer s.wg.Done()
		var rep cluster.Reply
		var call cluster.Call
		if err := json.Unmarshal(msg.Data, &call); err != nil {
			rep.Error = &cluster.ReplyError{Message: "undecodable call: " + err.Error()}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			rep = s.handle(ctx, call)
			cancel()
		}
		data, err := json.Marshal(rep)
		if err == nil {
			err = msg.Respond(data)
		}
		if err != nil {
			s.log.Warn("cluster: reply to a forwarded call failed", "op", call.Op, "sandbox_id", call.SandboxID, "err", err)
		}
	}()
}

// stop unsubscribes and waits for the calls in progress; twice is harmless.
func (s *server) stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	// Drain rather than unsubscribe: calls already delivered to this
	// process are answered (as moved) instead of dropped, which would
	// leave their senders waiting for the timeout. Once the server has
	// the drain, a call to this node finds no responders at once.
	err := s.sub.Drain()
	if err == nil {
		err = s.nc.Flush()
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("cluster: stop serving forwarded calls", "err", err)
	}
	s.wg.Wait()
}
