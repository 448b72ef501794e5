package natsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// When NATS goes away (its servers stopped, the network cut, a JetStream
// cluster that lost its quorum) the store says so at once, on every
// route, as the contract's unavailable, instead of after Options.Timeout.
// It knows of an outage from the connection (nats.go reports a disconnect
// at once), from a probe of the stream and the bucket every probeInterval,
// and from a request of its own that got no answer, which asks for a
// probe at once; it learns that NATS is back from the next probe that
// gets through, asked for at once when the connection is back.
//
// While NATS is known unreachable, a call that would write is refused
// before it sends anything, and so is a read that needs the server (what
// this process holds in memory is still answered). A call in flight when
// the outage is found gives up what it was reading at once, and a write
// it has begun writeGrace later: the client keeps what it could not send
// while reconnecting and sends it once NATS is back, so an outage shorter
// than that costs the write nothing. A write given up has an unknown
// outcome, as one that timed out always had: it may still land (the
// coordinator then finds its events beyond the state and folds them in,
// and the store recognises them when the same write is made again).

const (
	// probeInterval is how often the stream and the bucket are asked
	// whether they answer with a leader.
	probeInterval = time.Second
	// probeTimeout bounds one probe; a probe that times out counts as an
	// outage, so it is well above what a healthy server takes (well under
	// 10ms) even on a loaded machine.
	probeTimeout = 2 * time.Second
	// writeGrace is how long a write in flight when NATS is found
	// unreachable may wait for it to come back before it is given up: an
	// answer within a second either way.
	writeGrace = 500 * time.Millisecond
)

// errUnreachable is the cause of a request given up because NATS was
// found unreachable while it waited.
var errUnreachable = errors.New("NATS was found unreachable while the request waited")

// reach is what the store knows of whether NATS answers.
type reach struct {
	kick chan struct{} // asks the probe loop for a probe now

	mu     sync.Mutex
	reason string // why NATS is unreachable; "" while it answers
	// down is canceled (cause errUnreachable) once NATS is found
	// unreachable; a new one replaces it when NATS answers again.
	down context.Context
	cut  context.CancelCauseFunc
}

func newReach() *reach {
	r := &reach{kick: make(chan struct{}, 1)}
	r.down, r.cut = context.WithCancelCause(context.Background())
	return r
}

// fail records that NATS is unreachable, and why, and gives up every
// request waiting on it.
func (r *reach) fail(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reason = reason
	r.cut(errUnreachable)
}

// ok records that NATS answers. It reports whether that is news.
func (r *reach) ok() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason == "" {
		return false
	}
	r.reason = ""
	r.down, r.cut = context.WithCancelCause(context.Background())
	return true
}

func (r *reach) state() (string, context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason, r.down
}

// probeNow asks the probe loop for a probe without waiting for it.
func (r *reach) probeNow() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// unreachable returns why NATS is unreachable now, or "" while it answers
// as far as this process knows. It never waits.
func (s *Store) unreachable() string {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Sprintf("not connected to NATS (%s)", statusWord(st))
	}
	reason, _ := s.reach.state()
	return reason
}

func statusWord(st nats.Status) string {
	switch st {
	case nats.RECONNECTING, nats.DISCONNECTED:
		return "reconnecting"
	case nats.CLOSED:
		return "the connection is closed"
	}
	return st.String()
}

// Unreachable returns nil while NATS answers as far as this process
// knows, and otherwise an unavailable *sandbox.Error that says why. It
// never waits: the cluster side of the process asks it before a request
// of its own.
func (s *Store) Unreachable() error {
	if reason := s.unreachable(); reason != "" {
		return unavailableError(reason, true)
	}
	return nil
}

// cutOff returns ctx, given up as soon as NATS is found unreachable (at
// once if it is known to be), with errUnreachable as its cause.
func (s *Store) cutOff(ctx context.Context) (context.Context, context.CancelFunc) {
	_, down := s.reach.state()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(down, func() { cancel(errUnreachable) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// cutOffWrites returns ctx, given up writeGrace after NATS is found
// unreachable unless it answers again by then, with errUnreachable as its
// cause.
func (s *Store) cutOffWrites(ctx context.Context) (context.Context, context.CancelFunc) {
	_, down := s.reach.state()
	ctx, cancel := context.WithCancelCause(ctx)
	var timer *time.Timer
	var mu sync.Mutex
	stop := context.AfterFunc(down, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(writeGrace, func() {
			if _, now := s.reach.state(); now == down { // not back since
				cancel(errUnreachable)
			}
		})
	})
	return ctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// CutOffWrites is cutOffWrites for the cluster side of the process.
func (s *Store) CutOffWrites(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.cutOffWrites(ctx)
}

// CutOff is cutOff for the cluster side of the process, whose reads of
// NATS are given up with the store's.
func (s *Store) CutOff(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.cutOff(ctx)
}

// begin starts a call that asks the server: it returns the context its
// reads use (see cutOff) and the function that ends it, which turns an
// error of NATS being unreachable into unavailable (see classify).
func (s *Store) begin(ctx context.Context, write bool) (context.Context, func(error) error) {
	bctx, cancel := s.cutOff(ctx)
	return bctx, func(err error) error {
		err = s.classify(ctx, bctx, err, write)
		cancel()
		return err
	}
}

// Classify is classify for the cluster side of the process: err of a
// call whose reads used bctx, from CutOff(ctx). Its calls all take or
// keep leases, which are writes.
func (s *Store) Classify(ctx, bctx context.Context, err error) error {
	return s.classify(ctx, bctx, err, true)
}

// classify returns err as an unavailable *sandbox.Error when it says NATS
// did not answer (see unreachableReason), and err itself otherwise: a
// refusal of what was asked, a fault of this program or of a stored value,
// the caller giving up (ctx done), a fenced append. bctx is the context
// the call's requests used.
func (s *Store) classify(ctx, bctx context.Context, err error, write bool) error {
	if err == nil {
		return nil
	}
	var se *sandbox.Error
	var fe *FencedError
	if errors.As(err, &se) || errors.As(err, &fe) || errors.Is(err, ErrClosed) {
		return err
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return err // the caller left
	}
	reason := unreachableReason(err)
	if reason == "" && bctx != nil && context.Cause(bctx) == errUnreachable {
		reason = errUnreachable.Error()
	}
	if reason == "" {
		return err
	}
	if known := s.unreachable(); known != "" {
		reason = known // what the store found out is more to the point
	} else {
		s.reach.probeNow()
	}
	s.log.Debug("natsstore: a request found NATS unreachable", "reason", reason, "err", err)
	return unavailableError(reason, write)
}

// unavailableError is the contract's unavailable for a store that NATS
// does not answer.
func unavailableError(reason string, write bool) *sandbox.Error {
	if write {
		return sandbox.Errorf(sandbox.EUnavailable,
			"the event store cannot take writes: %s; try again shortly", reason)
	}
	return sandbox.Errorf(sandbox.EUnavailable,
		"the event store cannot be read: %s; try again shortly", reason)
}

// unreachableReason says in a few words why err means that NATS did not
// answer (the connection down, a request that timed out, no responders, a
// JetStream that says it is temporarily unavailable), or "" when it means
// something else.
func unreachableReason(err error) string {
	var apiErr *jetstream.APIError
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errUnreachable):
		return errUnreachable.Error()
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrNoServers):
		return "not connected to NATS (reconnecting)"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConnectionClosed),
		errors.Is(err, nats.ErrStaleConnection), errors.Is(err, jetstream.ErrServerShutdown):
		return "the connection to NATS was lost"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "JetStream does not respond (no responders: its servers are gone or have no leader)"
	case errors.As(err, &apiErr):
		if apiErr.Code == 503 {
			return fmt.Sprintf("JetStream is temporarily unavailable (%s)", apiErr.Description)
		}
		return ""
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, jetstream.ErrNoHeartbeat):
		return "NATS did not answer in time"
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection to NATS failed"
	}
	return ""
}

// probeLoop keeps what the store knows of NATS up to date: a probe every
// probeInterval, and one at once when asked (the connection is back, a
// request got no answer).
func (s *Store) probeLoop(ctx context.Context) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		s.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.reach.kick:
		}
	}
}

// probe asks the stream and the bucket whether they answer with a leader,
// and records what it found.
func (s *Store) probe(ctx context.Context) {
	err := s.check(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		reason, _ := s.reach.state()
		if reason == "" {
			s.log.Warn("natsstore: NATS is unreachable; requests that need it are answered unavailable until it answers", "err", err)
		}
		s.reach.fail(probeReason(err))
		return
	}
	if s.reach.ok() {
		s.log.Info("natsstore: NATS answers again")
	}
}

// probeReason is the reason a probe failed, in the words of the API.
func probeReason(err error) string {
	if r := unreachableReason(err); r != "" {
		return r
	}
	return err.Error()
}

// check asks NATS whether the store can write now: connected, and the
// stream and the bucket answer with a leader.
func (s *Store) check(ctx context.Context) error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("not connected to NATS (%s)", statusWord(st))
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s does not answer: %w", s.streamName, err)
	}
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return fmt.Errorf("stream %s has no leader", s.streamName)
	}
	st, err := s.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("key-value bucket %s does not answer: %w", s.kv.Bucket(), err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		if ci := bs.StreamInfo().Cluster; ci != nil && ci.Leader == "" {
			return fmt.Errorf("key-value bucket %s has no leader", s.kv.Bucket())
		}
	}
	return nil
}

// Health reports whether the store can write now, as far as this process
// knows: connected to NATS, and the last probe of the stream and the
// bucket found them answering with a leader. It never waits for the
// server, so a readiness check that asks it answers at once.
func (s *Store) Health(context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if reason := s.unreachable(); reason != "" {
		return errors.New(reason)
	}
	return nil
}

// refuse returns unavailable, at once, for a call that needs the server
// while NATS is known unreachable; nil otherwise.
func (s *Store) refuse(write bool) error {
	if reason := s.unreachable(); reason != "" {
		return unavailableError(reason, write)
	}
	return nil
}
