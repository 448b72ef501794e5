package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

var _ sandbox.Store = (*Store)(nil)

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("event store is closed")

// Defaults of Options.
const (
	DefaultStreamName    = "SPARKLES"
	DefaultKVBucket      = "sparkles"
	DefaultSubjectPrefix = "sparkles.events"
	DefaultTimeout       = 10 * time.Second
	DefaultStartTimeout  = 60 * time.Second
	// DefaultReplicas keeps one copy: replicas need a JetStream cluster.
	DefaultReplicas = 1
)

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// StreamName is the JetStream stream of the event logs (default SPARKLES).
	StreamName string
	// KVBucket is the key-value bucket of states and resources (default sparkles).
	KVBucket string
	// WebhookBucket is the key-value bucket of webhook endpoints and their
	// cursors (default <KVBucket>-webhooks).
	WebhookBucket string
	// SubjectPrefix is the stream's subject space: the log of sandbox id is
	// <SubjectPrefix>.<id> (default sparkles.events). Two deployments can
	// share a NATS account with different prefixes and names.
	SubjectPrefix string
	// MaxAge is a safety net on the stream: JetStream drops messages older
	// than this on its own, without moving any watermark. Set it well above
	// the retention loop's age, which is what prunes (default 0: none).
	MaxAge time.Duration
	// Replicas of the stream and the bucket when Open creates them (default
	// 1). A stream or bucket that exists keeps its own: an operator may
	// have made it with 3 and Sparkles must not shrink it.
	Replicas int
	// Timeout bounds each request to the server, and an append from its
	// first publish to its state update, which runs to the end even if the
	// caller gives up, so no append is left half done (default 10s).
	Timeout time.Duration
	// StartTimeout bounds how long Open, and Bucket after it, keep asking a
	// JetStream that does not answer yet or says it is temporarily
	// unavailable: a cluster started beside the coordinators, electing its
	// leaders or its new stream's (default 60s). Any other refusal ends
	// Open at once.
	StartTimeout time.Duration
	Logger       *slog.Logger
	// Now stamps events appended without a ts (default time.Now).
	Now func() time.Time
	// NATSOptions are passed to nats.Connect: credentials, TLS, a name.
	NATSOptions []nats.Option
	// Observer is told of every append that made events durable; nil
	// observes nothing.
	Observer Observer
}

// Observer is told how many events one append made durable and how long it
// took, from its first publish to its state update. sync is always 0: the
// server's syncs are not seen from a client.
type Observer interface {
	Commit(events int, took, sync time.Duration)
}

// Store is the NATS JetStream implementation of sandbox.Store, plus the
// retention methods. See doc.go for the layout and which methods are safe
// from several processes at once.
type Store struct {
	nc            *nats.Conn
	js            jetstream.JetStream
	stream        jetstream.Stream
	kv            jetstream.KeyValue
	webhooks      jetstream.KeyValue // endpoints and cursors (webhooks.go)
	streamName    string
	kvStream      string // the stream behind the bucket
	kvPrefix      string // the subject prefix of the bucket's keys
	subjectPrefix string // of the logs: <subjectPrefix>.<id>
	fencePrefix   string // of the fences: <fencePrefix>.<id>
	bothPrefix    string // a wildcard over both: <bothPrefix>.<id>
	log           *slog.Logger
	now           func() time.Time
	timeout       time.Duration
	startTimeout  time.Duration
	observer      Observer
	reach         *reach // whether NATS answers (reach.go)
	// publish puts the events of one append on the wire: pipelined on a
	// single server, as atomic batches on a replicated stream (publish.go).
	publish func(ctx context.Context, id string, batch []prepared, last, fence uint64) ([]uint64, error)

	cancel  context.CancelFunc
	watcher jetstream.KeyWatcher
	wg      sync.WaitGroup

	closeMu sync.RWMutex // held for reading by every call in progress
	closed  bool

	mu        sync.Mutex
	sandboxes map[string]*entry
	ids       []string          // the ids of sandboxes, sorted
	dropped   map[string]uint64 // dropped id -> the last state revision seen
	// holds are this process's holds on the logs it may write, by sandbox
	// id: the epoch of the fence it published, or 0 once the hold is lost
	// (see fence.go). A sandbox with no entry is written unfenced.
	holds map[string]uint64
	// leases reports whether the leases of the cluster this process is a
	// node of hold now; nil for a store that is no node (see Fences).
	leases func() bool

	// hooks is nil but in tests. A test sets it while the store's
	// goroutines run (the watch's among them), so it is replaced whole,
	// never changed in place.
	hooks atomic.Pointer[testHooks]
}

// testHooks are points of the write path where a test makes something
// happen in between (export_test.go sets them). The methods are safe on a
// nil *testHooks, which is what every store outside tests has.
type testHooks struct {
	// afterSend runs after event i of an append went out, before the next.
	afterSend func(id string, i int)
	// beforeCommit runs once an append's events are stored (or at once if
	// it has none), before its state is.
	beforeCommit func(id string)
	// publish wraps each attempt to publish an append's events: it may
	// make it or not, and say what the writer learns of it.
	publish func(do func() ([]uint64, error)) ([]uint64, error)
	// lagging makes the buckets' direct gets of the keys it names answer
	// not found, as a replica that has not caught up does.
	lagging func(key string) bool
	// laggingLog cuts the replies of batched direct gets of the log, which
	// then say nothing more is pending, as a replica that has not caught
	// up does.
	laggingLog func(msgs []*nats.Msg) []*nats.Msg
	// cursorWritten runs once SetWebhookCursor has written a cursor of
	// endpoint id, before it checks that the endpoint is still there.
	cursorWritten func(id string)
	// watch runs before the watch applies a change of a sandbox's state,
	// in the watch's goroutine: a test blocks it to make this process's
	// view lag, as a watch under load does.
	watch func(key string)
}

func (h *testHooks) watched(key string) {
	if h != nil && h.watch != nil {
		h.watch(key)
	}
}

func (h *testHooks) isLagging(key string) bool {
	return h != nil && h.lagging != nil && h.lagging(key)
}

func (h *testHooks) webhookCursorWritten(id string) {
	if h != nil && h.cursorWritten != nil {
		h.cursorWritten(id)
	}
}

func (h *testHooks) sent(id string, i int) {
	if h != nil && h.afterSend != nil {
		h.afterSend(id, i)
	}
}

func (h *testHooks) publishing(do func() ([]uint64, error)) ([]uint64, error) {
	if h != nil && h.publish != nil {
		return h.publish(do)
	}
	return do()
}

func (h *testHooks) committing(id string) {
	if h != nil && h.beforeCommit != nil {
		h.beforeCommit(id)
	}
}

// entry is what this process knows of one sandbox. wmu serializes this
// process's writes to it; the other fields are guarded by Store.mu. sb and
// state are never changed in place, only replaced, so a reader may keep
// what it took under the lock.
type entry struct {
	id  string
	wmu sync.Mutex

	sb    sandbox.Sandbox // the resource and watermarks as of rev
	rev   uint64          // revision of the state record that sb is from
	state *sandbox.State  // the whole state at rev; nil until needed
	wait  chan struct{}   // made on demand, closed by the next change
	gone  bool            // dropped

	// owner is the epoch of the fence that the state at rev records as
	// the log's holder (0: none recorded); known with state.
	owner uint64

	// tip and fence are the last messages of the sandbox's log and fence
	// subjects, as this process last confirmed them for the state at rev
	// (tipOK). An append expects the later of the two as the last sequence
	// of both subjects, which is how it finds events that another process
	// published and never folded, and a fence another node put up.
	tip   uint64
	fence uint64
	tipOK bool

	// unsure is this process's last append to the sandbox whose outcome
	// is unknown, kept so that the same events appended again are
	// recognised where they landed (see recognise); nil when there is
	// none. Guarded by wmu, not Store.mu.
	unsure *unsureAppend
}

func (e *entry) wake() {
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}

// Open connects to the NATS server at url, checks that it is recent enough
// and has JetStream, creates the stream and the bucket if they do not exist
// (an existing one keeps its settings; what Sparkles cannot work with is
// an error, see setup.go), learns every sandbox from the bucket, and folds
// into its state any events that a process which crashed mid-append left
// beyond it.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.StreamName == "" {
		opts.StreamName = DefaultStreamName
	}
	if opts.KVBucket == "" {
		opts.KVBucket = DefaultKVBucket
	}
	if opts.SubjectPrefix == "" {
		opts.SubjectPrefix = DefaultSubjectPrefix
	}
	if opts.WebhookBucket == "" {
		opts.WebhookBucket = opts.KVBucket + "-webhooks"
	}
	if opts.Replicas < 1 {
		opts.Replicas = DefaultReplicas
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	reach := newReach()
	nopts := append([]nats.Option{
		nats.Name("sparkles"),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("natsstore: subscription error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("natsstore: connection error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("natsstore: disconnected from NATS", "err", err)
			}
			reach.fail("not connected to NATS (reconnecting)")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("natsstore: reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			reach.probeNow()
		}),
	}, opts.NATSOptions...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", url, err)
	}
	s := &Store{
		nc:            nc,
		streamName:    opts.StreamName,
		kvStream:      "KV_" + opts.KVBucket,
		kvPrefix:      "$KV." + opts.KVBucket + ".",
		subjectPrefix: opts.SubjectPrefix,
		fencePrefix:   fencePrefix(opts.SubjectPrefix),
		bothPrefix:    bothPrefix(opts.SubjectPrefix),
		log:           opts.Logger,
		now:           opts.Now,
		timeout:       opts.Timeout,
		startTimeout:  opts.StartTimeout,
		observer:      opts.Observer,
		reach:         reach,
		sandboxes:     make(map[string]*entry),
		dropped:       make(map[string]uint64),
		holds:         make(map[string]uint64),
	}
	if err := s.init(ctx, opts); err != nil {
		s.shutdown()
		return nil, err
	}
	return s, nil
}

func (s *Store) init(ctx context.Context, opts Options) error {
	if err := checkServer(s.nc); err != nil {
		return err
	}
	js, err := jetstream.New(s.nc, jetstream.WithDefaultTimeout(s.timeout))
	if err != nil {
		return err
	}
	s.js = js
	until := time.Now().Add(s.startTimeout)
	if err := s.whenReady(ctx, until, s.checkJetStream); err != nil {
		return err
	}
	if err := s.whenReady(ctx, until, func(ctx context.Context) error { return s.openStream(ctx, opts) }); err != nil {
		return err
	}
	if err := s.whenReady(ctx, until, func(ctx context.Context) (err error) {
		s.kv, err = s.openBucket(ctx, jetstream.KeyValueConfig{
			Bucket:      opts.KVBucket,
			Description: "Sparkles sandbox states, configs, turns and approvals",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
		}, noTTL)
		return err
	}); err != nil {
		return err
	}
	if err := s.openWebhooks(ctx, until, opts); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// A bucket just made with replicas may not have elected its leader
	// yet: its watch is asked again, within the request timeout, before
	// the store gives up on it.
	deadline := time.Now().Add(s.timeout)
	for {
		s.watcher, err = s.kv.WatchFiltered(wctx, []string{"state.*"})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond): // backoff between asks, not a wait for a condition
		case <-ctx.Done():
		}
	}
	if err != nil {
		cancel()
		return fmt.Errorf("cannot watch bucket %s: %w", opts.KVBucket, err)
	}
	// The initial values end with a nil entry; only then is every sandbox
	// known, so listings are complete from the start.
initial:
	for {
		select {
		case kve, ok := <-s.watcher.Updates():
			if !ok {
				return errors.New("watch of sandbox states ended while loading")
			}
			if kve == nil {
				break initial
			}
			s.applyWatch(kve)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.watchLoop(wctx)
	}()
	go func() {
		defer s.wg.Done()
		s.probeLoop(wctx)
	}()
	return s.repairAll(ctx)
}

// watchLoop follows every change of a sandbox state in the bucket, by this
// process or another, so Head, Wait and listings follow them too.
func (s *Store) watchLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case kve, ok := <-s.watcher.Updates():
			if !ok {
				return
			}
			if kve != nil {
				s.hooks.Load().watched(kve.Key())
				s.applyWatch(kve)
			}
		}
	}
}

func (s *Store) applyWatch(kve jetstream.KeyValueEntry) {
	id, ok := cutKey(kve.Key(), "state.")
	if !ok {
		return
	}
	if kve.Operation() != jetstream.KeyValuePut {
		s.forget(id, kve.Revision())
		return
	}
	sb, err := decodeSandbox(kve.Value())
	if err != nil {
		s.log.Error("natsstore: undecodable sandbox state", "sandbox_id", id, "revision", kve.Revision(), "err", err)
		return
	}
	s.observe(id, sb, nil, 0, kve.Revision())
}

func cutKey(key, prefix string) (string, bool) {
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix {
		return "", false
	}
	return key[len(prefix):], true
}

// observe records a state revision of sandbox id, from the watch, a load or
// this process's own write, and wakes its waiters when it is news. st, when
// not nil, is the whole state of that revision and owner the holder it
// records. It returns the entry, or nil if the sandbox has been dropped
// since that revision.
func (s *Store) observe(id string, sb sandbox.Sandbox, st *sandbox.State, owner, rev uint64) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.dropped[id] {
		return nil
	}
	e := s.sandboxes[id]
	if e == nil {
		e = &entry{id: id}
		s.sandboxes[id] = e
		if i, found := slices.BinarySearch(s.ids, id); !found {
			s.ids = slices.Insert(s.ids, i, id)
		}
	}
	switch {
	case rev > e.rev:
		e.sb, e.rev, e.state, e.owner, e.tipOK = sb, rev, st, owner, false
		e.wake()
	case rev == e.rev && e.state == nil:
		e.state, e.owner = st, owner
	}
	return e
}

// forget removes a dropped sandbox and wakes its waiters; revisions up to
// rev that arrive late (the watch lags this process's own Drop) are ignored.
func (s *Store) forget(id string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sandboxes[id]
	if e != nil && e.rev > rev {
		return // recreated since
	}
	if rev > 0 {
		s.dropped[id] = max(s.dropped[id], rev)
	}
	if e == nil {
		return
	}
	e.gone = true
	e.wake()
	delete(s.sandboxes, id)
	if i, found := slices.BinarySearch(s.ids, id); found {
		s.ids = slices.Delete(s.ids, i, i+1)
	}
}

// setTip records the last messages of the log and fence subjects as
// confirmed for revision rev.
func (s *Store) setTip(e *entry, rev, tip, fence uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.rev == rev {
		e.tip, e.fence, e.tipOK = tip, fence, true
	}
}

// invalidate drops the cached whole state of a sandbox after a write whose
// outcome is unknown, so the next write loads it again from the bucket.
func (s *Store) invalidate(e *entry) {
	s.mu.Lock()
	e.state, e.tipOK = nil, false
	s.mu.Unlock()
}

// lookup returns the entry of sandbox id. One not known here yet (created
// by another process a moment ago, ahead of the watch) is read from the
// bucket.
func (s *Store) lookup(ctx context.Context, id string) (*entry, error) {
	if !validID(id) {
		return nil, notFound(id)
	}
	s.mu.Lock()
	e := s.sandboxes[id]
	s.mu.Unlock()
	if e != nil {
		return e, nil
	}
	e, _, err := s.fetch(ctx, id)
	return e, err
}

// stored is one revision of a sandbox's state record.
type stored struct {
	st    *sandbox.State
	owner uint64 // the epoch of the log's holder it records
	rev   uint64
}

// fetch reads the state of sandbox id from the bucket and records it.
func (s *Store) fetch(ctx context.Context, id string) (*entry, stored, error) {
	return s.fetchFrom(ctx, id, s.kv.Get)
}

// fetchLatest is fetch from the bucket's leader, which has every state the
// bucket acknowledged, where a replica that answers a direct get may be
// behind: for a cursor beyond what this process knows, which comes from
// something another process wrote.
func (s *Store) fetchLatest(ctx context.Context, id string) (*entry, stored, error) {
	return s.fetchFrom(ctx, id, func(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
		return s.leaderGet(ctx, s.kv.Bucket(), key)
	})
}

func (s *Store) fetchFrom(ctx context.Context, id string, get func(context.Context, string) (jetstream.KeyValueEntry, error)) (*entry, stored, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kve, err := get(ctx, stateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.mu.Lock()
		e := s.sandboxes[id]
		var rev uint64
		if e != nil {
			rev = e.rev
		}
		s.mu.Unlock()
		if e != nil {
			s.forget(id, rev) // dropped by another process, ahead of the watch
		}
		return nil, stored{}, notFound(id)
	}
	if err != nil {
		return nil, stored{}, fmt.Errorf("sandbox %s: read state: %w", id, err)
	}
	st, owner, err := decodeState(kve.Value())
	if err != nil {
		return nil, stored{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if st.LogBytes == 0 && st.Sandbox.OldestEventID != 0 {
		// Written before the state counted its log's bytes: counted here,
		// and stored with the sandbox's next write.
		if st.LogBytes, err = s.rangeBytes(ctx, id, uint64(st.Sandbox.PrunedThrough)+1, uint64(st.Sandbox.LastEventID)); err != nil {
			return nil, stored{}, err
		}
	}
	e := s.observe(id, st.Sandbox, st, owner, kve.Revision())
	if e == nil {
		return nil, stored{}, notFound(id)
	}
	return e, stored{st: st, owner: owner, rev: kve.Revision()}, nil
}

// opCtx bounds a request to the server when the caller's context does not.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) subject(id string) string { return s.subjectPrefix + "." + id }

// fenceSubject is where the nodes that take sandbox id's log over put up
// their fences (see fence.go).
func (s *Store) fenceSubject(id string) string { return s.fencePrefix + "." + id }

// bothSubjects matches the log and the fence subject of sandbox id and no
// other subject of the stream: its last sequence is the later of theirs.
func (s *Store) bothSubjects(id string) string { return s.bothPrefix + "." + id }

// enter admits a call unless the store is closed; leave ends it. Close
// waits for the calls in progress.
func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) leave() { s.closeMu.RUnlock() }

// Conn is what a store shares of its connection with the cluster side of
// the same process (natscluster), which speaks on it: the NATS
// connection, the bound of a request that has no deadline of its own
// (Options.Timeout), and the store's logger. The store owns the
// connection: Close closes it.
type Conn struct {
	NATS    *nats.Conn
	Timeout time.Duration
	Logger  *slog.Logger
}

// Conn returns the store's connection.
func (s *Store) Conn() Conn { return Conn{NATS: s.nc, Timeout: s.timeout, Logger: s.log} }

// Close waits for the calls in progress, stops following the bucket, wakes
// every waiter and closes the connection. Every call after Close fails with
// ErrClosed; what other processes keep in the stream and bucket stays.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.shutdown()
	s.mu.Lock()
	for _, e := range s.sandboxes {
		e.wake()
	}
	s.mu.Unlock()
	return nil
}

func (s *Store) shutdown() {
	if s.watcher != nil {
		s.watcher.Stop()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.nc.Close()
}

// repairAll folds the events a crashed append left beyond the state of any
// sandbox. It asks for the last sequence of many subjects at once.
func (s *Store) repairAll(ctx context.Context) error {
	s.mu.Lock()
	last := make(map[string]uint64, len(s.sandboxes))
	for id, e := range s.sandboxes {
		last[id] = uint64(e.sb.LastEventID)
	}
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	var errs []error
	for chunk := range slices.Chunk(ids, 512) {
		subjects := make([]string, len(chunk))
		for i, id := range chunk {
			subjects[i] = s.subject(id)
		}
		tips, err := s.lastSeqs(ctx, subjects, 0)
		if err != nil {
			return fmt.Errorf("cannot read the tips of the event logs: %w", err)
		}
		for _, id := range chunk {
			if tips[s.subject(id)] <= last[id] {
				continue
			}
			if err := s.repairOne(ctx, id); err != nil && !sandbox.IsType(err, sandbox.ENotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Store) repairOne(ctx context.Context, id string) error {
	e, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	s.invalidate(e)
	_, err = s.loadForWrite(ctx, e, nil)
	return err
}

// leaderKV is a bucket whose Get believes a not found only once the
// stream's leader says it too. kv.Get is a direct get, which any replica
// of the bucket may answer, and one that has not caught up yet answers
// "not found" for a key written a moment ago: a state another process
// just created (the store then forgot the sandbox, and an append answered
// not_found), or a node that just registered (a claim then took a live
// node's lease). The leader holds every write the bucket acknowledged;
// its not found, or a delete marker, is one. Every bucket the store opens
// is one of these, the cluster's too (Bucket).
type leaderKV struct {
	jetstream.KeyValue
	s *Store
}

func (kv leaderKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	var kve jetstream.KeyValueEntry
	var err error = jetstream.ErrKeyNotFound
	if !kv.s.hooks.Load().isLagging(key) {
		kve, err = kv.KeyValue.Get(ctx, key)
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return kve, err
	}
	return kv.s.leaderGet(ctx, kv.Bucket(), key)
}

// leaderGet reads the last message of a key's subject through the stream's
// leader (the message-get API, not the direct get).
func (s *Store) leaderGet(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, error) {
	m, err := s.leaderMsg(ctx, "KV_"+bucket, leaderRequest{LastFor: "$KV." + bucket + "." + key})
	if err != nil {
		return nil, fmt.Errorf("get %s from the leader: %w", key, err)
	}
	if m == nil {
		return nil, jetstream.ErrKeyNotFound
	}
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("get %s from the leader: %w", key, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return leaderEntry{bucket: bucket, key: key, value: m.Data, rev: m.Sequence, created: m.Time}, nil
}

// leaderNext reads the first message of subject with a sequence >= from
// from the log's leader, as a direct get reply would carry it; nil if
// there is none.
func (s *Store) leaderNext(ctx context.Context, subject string, from uint64) (*nats.Msg, uint64, error) {
	m, err := s.leaderMsg(ctx, s.streamName, leaderRequest{Seq: from, NextFor: subject})
	if err != nil || m == nil {
		return nil, 0, err
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Data
	msg.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(m.Sequence, 10))
	msg.Header.Set(jetstream.SubjectHeader, m.Subject)
	return msg, m.Sequence, nil
}

// leaderRequest asks the message-get API for the last message of a subject
// (LastFor) or the first one at or after a sequence (Seq, NextFor).
type leaderRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// leaderMessage is a message as the message-get API returns it.
type leaderMessage struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs"`
	Data     []byte    `json:"data"`
	Time     time.Time `json:"time"`
}

// leaderMsg asks stream's leader for one message (the message-get API,
// which the leader answers, unlike a direct get); nil when there is none.
func (s *Store) leaderMsg(ctx context.Context, stream string, req leaderRequest) (*leaderMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *leaderMessage      `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, errors.New("an answer with no message")
	}
	return resp.Message, nil
}

// leaderEntry is a value leaderGet read.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
}

func (e leaderEntry) Bucket() string                  { return e.bucket }
func (e leaderEntry) Key() string                     { return e.key }
func (e leaderEntry) Value() []byte                   { return e.value }
func (e leaderEntry) Revision() uint64                { return e.rev }
func (e leaderEntry) Created() time.Time              { return e.created }
func (e leaderEntry) Delta() uint64                   { return 0 }
func (e leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
