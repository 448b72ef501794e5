package natsstore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The Store and what every call of it shares: the test hooks of its write
// path, the admission of calls (enter, leave) that Close waits for, the
// bound of a request, the subjects of a sandbox, and the connection it
// shares with the cluster side.

var _ sandbox.Store = (*Store)(nil)

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("event store is closed")

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
