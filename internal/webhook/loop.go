package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sparkles-dev/sparkles/sandbox"
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
	l.mu.Unlock()
	for _, r := range l.running {
		r.scan(ctx)
	}
	return nil
}

// runner delivers one endpoint's events: a worker per sandbox, sharing
// the endpoint's bound on requests in flight.
type runner struct {
	l       *Loop
	ep      Endpoint
	rec     []byte // the record it started on
	signer  *standardwebhooks.Webhook
	sem     chan struct{}
	cursors map[string]uint64 // loaded at start, then as saved; under mu

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	workers map[string]bool      // sandboxes with a worker
	claimed map[string]time.Time // when a sandbox held elsewhere was last tried
}

func (l *Loop) startRunner(ctx context.Context, ep Endpoint, rec []byte) (*runner, error) {
	signer, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	cursors, err := l.cfg.Store.WebhookCursors(ctx, ep.ID)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if r := l.rotated[ep.ID]; r.secret == ep.Secret {
		delete(l.rotated, ep.ID) // the record carries it now
	}
	l.mu.Unlock()
	rctx, cancel := context.WithCancel(ctx)
	return &runner{l: l, ep: ep, rec: rec, signer: signer, sem: make(chan struct{}, l.cfg.Concurrency),
		cursors: cursors, ctx: rctx, cancel: cancel, workers: map[string]bool{}, claimed: map[string]time.Time{}}, nil
}

func (r *runner) stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *runner) done() bool { return r.ctx.Err() != nil }

// scan starts a worker for each sandbox the endpoint receives events of
// that has none yet.
func (r *runner) scan(ctx context.Context) {
	if r.ep.SandboxID != "" {
		r.consider(ctx, r.ep.SandboxID)
		return
	}
	after := ""
	for {
		list, more, err := r.l.cfg.Log.Sandboxes(ctx, after, 1000)
		if err != nil {
			if ctx.Err() == nil {
				r.l.log.Error("webhooks: list sandboxes", "endpoint", r.ep.ID, "err", err)
			}
			return
		}
		for _, sb := range list {
			r.consider(ctx, sb.ID)
		}
		if !more || len(list) == 0 {
			return
		}
		after = list[len(list)-1].ID
	}
}

// claimEvery is how often a sandbox that another node may deliver is
// claimed again when it has events beyond the endpoint's cursor.
const claimEvery = 10 * time.Second

// consider starts a worker for sandbox id if this node delivers its
// events: always on a store of its own; on a shared one, when it holds
// the sandbox's lease, or takes it because the sandbox has undelivered
// events and no live node holds it.
func (r *runner) consider(ctx context.Context, id string) {
	l := r.l
	if l.cfg.Holds == nil || l.cfg.Holds(id) {
		r.startWorker(id)
		return
	}
	if l.cfg.Claim == nil {
		return
	}
	head, err := l.cfg.Log.Head(id)
	r.mu.Lock()
	cursor := r.cursors[id]
	last, tried := r.claimed[id]
	due := err == nil && head.LastEventID > cursor && (!tried || l.cfg.Now().Sub(last) >= claimEvery)
	if due {
		r.claimed[id] = l.cfg.Now()
	}
	r.mu.Unlock()
	if !due {
		return
	}
	here, err := l.cfg.Claim(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("webhooks: claim a sandbox to deliver its events", "endpoint", r.ep.ID, "sandbox", id, "err", err)
		}
		return
	}
	if here {
		r.startWorker(id)
	}
}

// holds reports whether this node still delivers sandbox id.
func (r *runner) holds(id string) bool {
	return r.l.cfg.Holds == nil || r.l.cfg.Holds(id)
}

// lag counts the events beyond the endpoint's cursors of the sandboxes
// this runner has workers for.
func (r *runner) lag() uint64 {
	r.mu.Lock()
	cursors := make(map[string]uint64, len(r.workers))
	for id := range r.workers {
		cursors[id] = r.cursors[id]
	}
	r.mu.Unlock()
	var n uint64
	for id, c := range cursors {
		if h, err := r.l.cfg.Log.Head(id); err == nil && h.LastEventID > c {
			n += h.LastEventID - c
		}
	}
	return n
}

func (r *runner) startWorker(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers[id] || r.done() {
		return
	}
	r.workers[id] = true
	cursor, ok := r.cursors[id]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.work(id, cursor, ok)
		r.mu.Lock()
		delete(r.workers, id)
		r.mu.Unlock()
	}()
}

// work delivers the events of sandbox id after cursor, in order, until
// the runner stops or the sandbox is dropped. Without a stored cursor
// (known false) it starts from the oldest retained event, and events
// stamped before the endpoint was created are passed over.
func (r *runner) work(id string, cursor uint64, known bool) {
	ctx, l := r.ctx, r.l
	log := l.log.With("endpoint", r.ep.ID, "sandbox", id)
	if l.cfg.Holds != nil {
		// On a shared store another node may have delivered this sandbox
		// since the runner loaded its cursors: it resumes from the
		// cursor that node saved.
		stored, err := l.cfg.Store.WebhookCursors(ctx, r.ep.ID)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("webhooks: read the endpoint's cursors", "err", err)
			}
			return // the next scan starts the worker again
		}
		if c, ok := stored[id]; ok && (!known || c > cursor) {
			cursor, known = c, true
			r.advance(id, c)
		}
	}
	since := r.ep.CreatedAt.Truncate(time.Millisecond) // events' ts have ms precision
	// The cursor is saved after each page, saveEvery after the last save,
	// before a failed attempt's wait and when the worker stops, not after
	// every delivery: a crash delivers again what was taken since the
	// last save (with the same webhook-ids), and a delivery costs no
	// commit of its own.
	saved, lastSave := cursor, l.cfg.Now()
	flush := func() {
		if cursor > saved {
			r.saveCursor(id, cursor)
			saved, lastSave = cursor, l.cfg.Now()
		}
	}
	defer flush()
	failures := 0
	for ctx.Err() == nil && r.holds(id) {
		wake := l.cfg.Log.Wait(id) // before Read, so no commit between is missed
		recs, err := l.cfg.Log.Read(ctx, id, cursor, readPage)
		if err != nil {
			var se *sandbox.Error
			switch {
			case ctx.Err() != nil:
				return
			case errors.As(err, &se) && se.Type == sandbox.ENotFound:
				return // dropped; its cursor goes with the endpoint
			case errors.As(err, &se) && se.Type == sandbox.ECursorPruned && se.Marks != nil:
				log.Warn("webhooks: events pruned before they were delivered", "after", cursor, "pruned_through", se.Marks.PrunedThrough)
				cursor = uint64(se.Marks.PrunedThrough)
				flush()
				continue
			}
			failures++
			log.Error("webhooks: read the log", "err", err)
			if !sleepOrWake(ctx, backoff(l.cfg.MinBackoff, l.cfg.MaxBackoff, failures), nil) {
				return
			}
			continue
		}
		failures = 0
		if len(recs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			continue
		}
		for _, rec := range recs {
			deliver := r.ep.wants(id, rec.Type)
			if deliver && !known {
				ts, err := eventTime(rec)
				deliver = err != nil || !ts.Before(since)
			}
			if !deliver {
				cursor = rec.ID
				continue
			}
			if !r.deliver(id, rec, flush) {
				return
			}
			cursor, known = rec.ID, true
			r.advance(id, cursor)
			if l.cfg.Now().Sub(lastSave) >= saveEvery {
				flush()
			}
		}
		flush()
	}
}

// saveEvery bounds how long a worker delivering without pause keeps its
// progress in memory only.
const saveEvery = 200 * time.Millisecond

// deliver posts rec until the receiver takes it; the caller moves the
// cursor past it. It calls flush before the first wait for a retry. It
// returns false when the runner stopped first, or disabled the endpoint.
func (r *runner) deliver(id string, rec sandbox.Record, flush func()) bool {
	ctx, l := r.ctx, r.l
	body, err := Body(rec)
	if err != nil {
		// A record the store served is valid JSON; should one not be,
		// holding every later event behind it helps no one.
		l.log.Error("webhooks: skip an event", "endpoint", r.ep.ID, "sandbox", id, "event", rec.ID, "err", err)
		return true
	}
	wakeUp := l.begin(r.ep.ID, id, rec)
	defer l.end(r.ep.ID, id)
	var first time.Time
	for n := 1; ; n++ {
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		now := l.cfg.Now()
		a := post(ctx, l.cfg.Client, &r.ep, l.signer(r.ep.ID, r.signer), now, id, rec, body)
		a.N = n
		<-r.sem
		if !a.OK() && ctx.Err() != nil {
			return false
		}
		if first.IsZero() {
			first = now
		}
		disable := !a.OK() && now.Sub(first) >= l.cfg.DisableAfter
		delay := backoff(l.cfg.MinBackoff, l.cfg.MaxBackoff, n)
		if !a.OK() && !disable {
			a.Next = now.Add(delay)
		}
		if disable {
			r.disable(fmt.Sprintf("event %d of sandbox %s failed for %s: %s", rec.ID, id, now.Sub(first).Round(time.Second), a.Err))
		}
		l.record(a)
		switch {
		case a.OK():
			return true
		case disable:
			return false
		}
		l.log.Warn("webhooks: delivery failed", "endpoint", r.ep.ID, "sandbox", id, "event", rec.ID,
			"attempt", n, "status", a.Status, "err", a.Err, "retry_in", delay.Round(time.Millisecond))
		if n == 1 {
			flush()
		}
		if !sleepOrWake(ctx, delay, wakeUp) {
			return false
		}
	}
}

// disable turns the endpoint off with reason and stops its runner; the
// record is read again so a change made meanwhile is kept.
func (r *runner) disable(reason string) {
	l := r.l
	l.log.Error("webhooks: endpoint disabled", "endpoint", r.ep.ID, "reason", reason)
	r.cancel()
	ctx := l.ctx
	ep, err := Get(ctx, l.cfg.Store, r.ep.ID)
	if err == nil && ep.Enabled {
		ep.Enabled, ep.DisabledReason = false, reason
		err = Put(ctx, l.cfg.Store, ep)
	}
	if err != nil && ctx.Err() == nil {
		l.log.Error("webhooks: disable endpoint", "endpoint", r.ep.ID, "err", err)
	}
	l.Kick()
}

// advance records in memory that the endpoint is done with sandbox id's
// log through cursor.
func (r *runner) advance(id string, cursor uint64) {
	r.mu.Lock()
	r.cursors[id] = max(r.cursors[id], cursor)
	r.mu.Unlock()
}

func (r *runner) saveCursor(id string, cursor uint64) {
	r.advance(id, cursor)
	// Not the runner's context: a cursor earned by a 2xx is kept even
	// when the loop is closing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.l.ctx), cursorTimeout)
	defer cancel()
	err := r.l.cfg.Store.SetWebhookCursor(ctx, r.ep.ID, id, cursor)
	var se *sandbox.Error
	if err != nil && !(errors.As(err, &se) && se.Type == sandbox.ENotFound) {
		// The next start delivers again from the cursor kept: at least once.
		r.l.log.Error("webhooks: save cursor", "endpoint", r.ep.ID, "sandbox", id, "err", err)
	}
}

// backoff is the delay before attempt n+1 (n >= 1): lo doubled n-1
// times, capped at hi, drawn uniformly from its upper half.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// sleepOrWake waits d or until wake (nil: never); false when ctx ended
// first.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-wake:
		return true
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
