package webhook

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Defaults of Config.
const (
	DefaultMinBackoff   = 5 * time.Second
	DefaultMaxBackoff   = time.Hour
	DefaultDisableAfter = 72 * time.Hour
	DefaultConcurrency  = 4
	DefaultInterval     = 2 * time.Second
	readPage            = 256
	cursorTimeout       = 10 * time.Second
)

// Config configures a Loop.
type Config struct {
	Store  Store
	Log    Log
	Client *http.Client // NewClient's; NewClient(ClientOptions{}) when nil
	Logger *slog.Logger
	Now    func() time.Time

	// A failed attempt is retried after MinBackoff, doubling up to
	// MaxBackoff, each delay drawn in its upper half (jitter), so
	// endpoints that failed together do not retry together. An event
	// still failing DisableAfter after its first attempt disables the
	// endpoint, with the reason in its record.
	MinBackoff, MaxBackoff, DisableAfter time.Duration
	// Concurrency bounds the requests in flight to one endpoint; each
	// sandbox's events go one at a time, in order.
	Concurrency int
	// Interval is how often endpoints and sandboxes are listed again;
	// new events wake deliveries at once (the log's Wait).
	Interval time.Duration
	// OnAttempt, when set, is told of every attempt.
	OnAttempt func(Attempt)
	// Observer, when set, is told of every attempt too (metrics).
	Observer Observer

	// AllowPrivate lets endpoints name loopback, link-local and private
	// addresses (local development and tests): the registration check
	// and, when Client is nil, the delivery client's.
	AllowPrivate bool
	// Resolver resolves an endpoint's host at registration and, when
	// Client is nil, at every connection; nil is net.DefaultResolver.
	Resolver *net.Resolver

	// Holds and Claim, set on a store that several coordinators share,
	// say which sandboxes this node delivers: those whose lease it holds
	// (Holds, from memory). A sandbox held by no live node with events
	// beyond an endpoint's cursor is claimed (Claim, which answers
	// whether this node holds it after the attempt), so its events are
	// delivered even when nobody calls it. Nil: this node delivers every
	// sandbox.
	Holds func(sandboxID string) bool
	Claim func(ctx context.Context, sandboxID string) (bool, error)
}

// Loop delivers every enabled endpoint's events. Start runs it until Close.
type Loop struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	running map[string]*runner // by endpoint id; the loop goroutine's own

	mu    sync.Mutex
	stats map[string]*epStats // by endpoint id: kept across its runners
	// rotated holds the signer of a secret rotated since its endpoint's
	// runner started, so attempts sign with it at once.
	rotated map[string]rotation
}

// rotation is a secret rotated and the signer of it.
type rotation struct {
	secret string
	signer *standardwebhooks.Webhook
}

// New returns a Loop over cfg; it does nothing until Start.
func New(cfg Config) *Loop {
	if cfg.Client == nil {
		cfg.Client = NewClient(ClientOptions{AllowPrivate: cfg.AllowPrivate, Resolver: cfg.Resolver})
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.DisableAfter <= 0 {
		cfg.DisableAfter = DefaultDisableAfter
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Loop{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), running: map[string]*runner{}, stats: map[string]*epStats{},
		rotated: map[string]rotation{}}
}

// Start lists the endpoints at once and then every Interval, in the
// background, and runs the deliveries of each enabled one.
func (l *Loop) Start() {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.loop(l.ctx)
	}()
}

// Kick makes the loop list the endpoints now (one was created or changed).
func (l *Loop) Kick() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Close stops every delivery, interrupting requests in flight, and waits.
func (l *Loop) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *Loop) loop(ctx context.Context) {
	ticker := time.NewTicker(l.cfg.Interval)
	defer ticker.Stop()
	defer func() {
		for _, r := range l.running {
			r.stop()
		}
	}()
	for {
		if err := l.sync(ctx); err != nil && ctx.Err() == nil {
			l.log.Error("webhooks: list endpoints", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-l.kick:
		}
	}
}

// sync starts a runner for each enabled endpoint without one, and stops
// the runners of endpoints deleted, disabled or changed since they
// started (a changed one starts again on its new record).
func (l *Loop) sync(ctx context.Context) error {
	recs, err := l.cfg.Store.Webhooks(ctx)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(recs))
	for _, rec := range recs {
		ep, err := decode(rec)
		if err != nil {
			l.log.Error("webhooks: skip an endpoint", "err", err)
			continue
		}
		seen[ep.ID] = true
		r := l.running[ep.ID]
		if r != nil && (!bytes.Equal(r.rec, rec) || r.done()) {
			r.stop()
			delete(l.running, ep.ID)
			l.setRunner(ep.ID, nil)
			r = nil
		}
		if r == nil && ep.Enabled {
			r, err := l.startRunner(ctx, ep, rec)
			if err != nil {
				l.log.Error("webhooks: start endpoint", "endpoint", ep.ID, "err", err)
				continue
			}
			l.running[ep.ID] = r
			l.setRunner(ep.ID, r)
		}
	}
	for id, r := range l.running {
		if !seen[id] {
			r.stop()
			delete(l.running, id)
		}
	}
	l.mu.Lock()
	for id := range l.stats {
		if !seen[id] {
			delete(l.stats, id)
		}
	}
	for id := range l.rotated {
		if !seen[id] {
			delete(l.rotated, id)
		}
	}
	l.mu.Unlock()
	// One listing of the sandboxes serves every endpoint that receives
	// all of them, however many there are.
	var all []string
	listed := false
	for _, r := range l.running {
		if r.ep.SandboxID != "" {
			r.consider(ctx, r.ep.SandboxID)
			continue
		}
		if !listed {
			if all, err = l.sandboxIDs(ctx); err != nil {
				if ctx.Err() == nil {
					l.log.Error("webhooks: list sandboxes", "err", err)
				}
				return nil
			}
			listed = true
		}
		for _, id := range all {
			r.consider(ctx, id)
		}
	}
	return nil
}

// sandboxIDs lists every sandbox of the log, in id order.
func (l *Loop) sandboxIDs(ctx context.Context) ([]string, error) {
	var ids []string
	after := ""
	for {
		list, more, err := l.cfg.Log.Sandboxes(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			ids = append(ids, sb.ID)
		}
		if !more || len(list) == 0 {
			return ids, nil
		}
		after = list[len(list)-1].ID
	}
}

// signer is what signs endpoint id's next attempt: the secret of a
// rotation newer than the runner, else the runner's own.
func (l *Loop) signer(id string, own *standardwebhooks.Webhook) *standardwebhooks.Webhook {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.rotated[id]; ok {
		return r.signer
	}
	return own
}
