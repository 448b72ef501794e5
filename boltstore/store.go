package boltstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

var _ sandbox.Store = (*Store)(nil)

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("event store is closed")

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// Timeout bounds the wait for the file lock (default 1s), so a second
	// process on the same file fails at once instead of hanging.
	Timeout time.Duration
	Logger  *slog.Logger
	// MaxBatch bounds the writes committed in one transaction (default 1024).
	MaxBatch int
	// Now stamps events appended without a ts (default time.Now).
	Now func() time.Time
	// Observer is told of every commit of appends, for metrics; nil
	// observes nothing.
	Observer Observer
	// WatchInterval is how often the store checks that its file is still
	// the one at its path (default 2s; see doc.go, The file under the
	// store).
	WatchInterval time.Duration
}

// Observer is told how many events one group commit made durable, how
// long its transaction took to commit and sync, and how much of that was
// the disk's part: writing the pages and the two fdatasyncs.
type Observer interface {
	Commit(events int, took, sync time.Duration)
}

// When the committer moves the WAL into the sandboxes' buckets (see doc.go,
// Materialization). The limits bound the memory that unmaterialized records
// hold and the time one materialization transaction keeps appends waiting.
const (
	defaultWALMaxRecords = 20000
	defaultWALMaxBytes   = 8 << 20
	defaultChunkRecords  = 4096
	defaultChunkBytes    = 2 << 20
	// A chunk rewrites a few pages of every sandbox it touches, whatever
	// its records; bounding the sandboxes bounds its time when many
	// sandboxes each have a few records in the WAL.
	defaultChunkSandboxes = 32
	defaultTruncateBatch  = 8192
	defaultWALValueMax    = 8 << 10
	defaultFreelistMax    = 4096 // 32 KiB of list, 8 pages a commit
)

// walLimits are the materialization thresholds; tests lower them. A limit
// left at zero is the default (orDefaults).
type walLimits struct {
	maxRecords, maxBytes     int // above either, materialize after each batch
	chunkRecords, chunkBytes int // bound one materialization transaction
	chunkSandboxes           int // and the sandboxes it touches
	truncateBatch            int // WAL keys deleted per transaction at most
	valueMax                 int // bytes of entries per WAL value (see putWAL)
	freelistMax              int // free pages up to which a commit writes the list (see syncFreelistFor)
}

// Store is the bbolt implementation of sandbox.Store. See doc.go for
// the layout, the write path and the WAL.
type Store struct {
	db       *bbolt.DB
	log      *slog.Logger
	now      func() time.Time
	maxBatch int
	limits   walLimits
	observer Observer // nil observes nothing

	// The file: its path, what it was when opened, and its descriptor's
	// name under /proc for the operator to copy it from. moved is set
	// while the path names another file or none; checkFile, under
	// watchMu, is the only writer.
	path      string
	opened    fs.FileInfo
	openFile  string
	moved     atomic.Bool
	damaged   atomic.Bool // set once guard has caught bbolt failing on the file (markDamaged)
	watchMu   sync.Mutex
	stopWatch chan struct{}

	reqs    chan *request
	closeMu sync.RWMutex // held for reading while a request is queued
	closed  bool
	wg      sync.WaitGroup

	// commitMu is held by the committer from the start of a transaction
	// until its result is published, and by readers that load a sandbox from the file, so a
	// load never sees a commit before it is published.
	commitMu sync.Mutex

	// mu guards the published side: readers (Head, Wait, Read's memory,
	// the published values) share it; publishing a commit, forgetting a
	// failed one, loading a sandbox, the WAL's count and Close take it
	// alone.
	mu        sync.RWMutex
	sandboxes map[string]*entry // the sandboxes loaded so far

	// The WAL's bookkeeping. Only the committer changes it, under mu, so
	// the committer reads it without.
	tails    map[string]*entry // sandboxes with a walTail
	walRecs  int               // records in all tails
	walBytes int               // their stored size
	walLen   int               // entries in the WAL bucket, materialized or not

	// test is nil but in tests (see export_test.go).
	test *testHooks
}

// testHooks let tests steer and watch the committer. A nil *testHooks
// (every store outside tests) does nothing.
type testHooks struct {
	// keepWAL stops the committer from materializing except where a
	// write needs it (a prune, a compaction, a flush), so that Close
	// leaves the file as a crash after the last commit would.
	keepWAL atomic.Bool
	// afterCommit runs after each transaction of callers' writes has
	// committed and before it is published, with the last id of every
	// sandbox it changed: which ids were durable when a reader saw them.
	afterCommit func(last map[string]uint64)
	// afterMaterialize runs after each materialization transaction has
	// been published.
	afterMaterialize func()
	// failCommit runs at the end of each transaction of callers' writes;
	// an error from it rolls the transaction back, as a storage error
	// would.
	failCommit func() error
}

func (h *testHooks) keepingWAL() bool { return h != nil && h.keepWAL.Load() }

func (h *testHooks) committed(t *txn) {
	if h != nil && h.afterCommit != nil {
		h.afterCommit(t.lastIDs())
	}
}

func (h *testHooks) materialized() {
	if h != nil && h.afterMaterialize != nil {
		h.afterMaterialize()
	}
}

// failure is what failCommit makes of a transaction.
func (h *testHooks) failure() error {
	if h == nil || h.failCommit == nil {
		return nil
	}
	return h.failCommit()
}

// entry is the published, in-memory side of one sandbox. Its fields are
// guarded by Store.mu; sb and state are never changed in place, only
// replaced, so a reader may keep what it took under the lock.
type entry struct {
	sb    sandbox.Sandbox
	state *sandbox.State // nil until first needed, and after a failed commit
	// wait is the channel the next change closes, made on demand by a
	// reader under the shared lock (so it is set by compare-and-swap), and
	// taken by the publisher under the exclusive one.
	wait atomic.Pointer[chan struct{}]
	// wal is what only the WAL holds of this sandbox; nil when its buckets
	// are up to date. While it is set, state is never nil: memory, not the
	// file, is the sandbox's truth.
	wal *walTail
}

// waitChan returns the channel the next wake closes; s.mu must be held,
// shared or not.
func (e *entry) waitChan() <-chan struct{} {
	for {
		if c := e.wait.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if e.wait.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// wake closes the channel of the waiters, if any; s.mu must be held alone.
func (e *entry) wake() {
	if c := e.take(); c != nil {
		close(c)
	}
}

// take removes the waiters' channel for the caller to close once it has
// let go of s.mu, so that the woken readers do not queue on the lock the
// publisher still holds; s.mu must be held alone.
func (e *entry) take() chan struct{} {
	if c := e.wait.Swap(nil); c != nil {
		return *c
	}
	return nil
}

// request is one caller's write waiting for the committer.
type request struct {
	ctx  context.Context
	w    write
	done chan error
}

// write is one kind of change applied inside a shared transaction. reqErr
// fails this request alone and must leave the transaction untouched; txErr
// fails the whole batch.
type write interface {
	apply(t *txn) (reqErr, txErr error)
}

// Open opens (or creates) the store file at path, replays what its WAL holds
// into the sandboxes' buckets, and starts the committer.
func Open(path string, opts Options) (*Store, error) {
	return open(path, opts, walLimits{}, nil)
}

// orDefaults fills the limits left at zero with the defaults.
func (l walLimits) orDefaults() walLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.maxRecords, defaultWALMaxRecords)
	def(&l.maxBytes, defaultWALMaxBytes)
	def(&l.chunkRecords, defaultChunkRecords)
	def(&l.chunkBytes, defaultChunkBytes)
	def(&l.chunkSandboxes, defaultChunkSandboxes)
	def(&l.truncateBatch, defaultTruncateBatch)
	def(&l.valueMax, defaultWALValueMax)
	if l.freelistMax == 0 { // negative: no commit writes the list (tests)
		l.freelistMax = defaultFreelistMax
	}
	return l
}

// open is Open with the materialization limits and, in tests, the test
// hooks, which are in place before the committer starts.
func open(path string, opts Options, limits walLimits, test *testHooks) (*Store, error) {
	limits = limits.orDefaults()
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = defaultWatchInterval
	}
	// The file is locked and checked before bbolt maps it: bbolt cannot
	// be stopped from crashing the process on a damaged file (see
	// verifyFile), and a file checked before the lock could be changing
	// under a server that holds it.
	f, opened, err := openLocked(path, os.O_RDWR|os.O_CREATE, true, opts.Timeout)
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("event store %s is in use by another sparkles process; stop that process or use another data dir (%w)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open event store %s: %w", path, unwrapPathErr(err))
	}
	checkStart := time.Now()
	whole, err := verifyOpen(f, path, false)
	if err != nil {
		f.Close()
		return nil, err
	}
	if whole {
		opts.Logger.Info("event store: the file was not closed by a server (a crash, or a kill): every page was checked before opening it",
			"path", path, "took", time.Since(checkStart).Round(time.Millisecond))
	}
	bopts := boltOptions(opts.Timeout)
	bopts.OpenFile = handTo(f)
	var db *bbolt.DB
	var replayed, built int
	err = guard(path, opts.Logger, func() error {
		var err error
		if db, err = bbolt.Open(path, 0o600, bopts); err != nil {
			return fmt.Errorf("cannot open event store %s: %w", path, err)
		}
		// A file a server closed cleanly needs no write: its buckets are
		// there and its WAL is empty. A start then commits nothing (a
		// commit writes the meta page and syncs the file twice).
		var clean bool
		if err := db.View(func(tx *bbolt.Tx) error {
			wal := tx.Bucket(bucketWAL)
			if wal == nil || tx.Bucket(bucketSandboxes) == nil || tx.Bucket(bucketUnsettled) == nil {
				return nil
			}
			first, _ := wal.Cursor().First()
			clean = first == nil
			return nil
		}); err != nil || clean {
			return err
		}
		// The first read pass: the WAL and every sandbox it names.
		err = update(db, func(tx *bbolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(bucketSandboxes); err != nil {
				return err
			}
			var err error
			u, build := tx.Bucket(bucketUnsettled), false
			if u == nil {
				if u, err = tx.CreateBucket(bucketUnsettled); err != nil {
					return err
				}
				build = true
			}
			if replayed, err = replayWAL(tx, u); err != nil {
				return &DamagedError{Path: path, Problem: fmt.Sprintf("its write-ahead log cannot be replayed (%v)", err)}
			}
			if build {
				// A file written before the bucket existed: listed once.
				if built, err = buildUnsettled(tx, u); err != nil {
					return &DamagedError{Path: path, Problem: fmt.Sprintf("its sandboxes cannot be listed (%v)", err)}
				}
			}
			return nil
		})
		if _, ok := errors.AsType[*DamagedError](err); err != nil && !ok {
			return fmt.Errorf("cannot initialize event store %s: %w", path, err)
		}
		return err
	})
	if err != nil {
		if db != nil {
			db.Close()
		} else {
			f.Close() // not closed by bbolt if it panicked; closing twice is harmless
		}
		return nil, err
	}
	if replayed > 0 {
		opts.Logger.Info("event store: replayed the WAL of an unclean shutdown", "path", path, "entries", replayed)
	}
	if built > 0 {
		opts.Logger.Info("event store: listed the sandboxes that a start recovers, once, for a file written before the store kept them", "path", path, "sandboxes", built)
	}
	// The exclusive lock is held: no compaction runs, so a copy of one
	// beside the file was left by one that was interrupted.
	err = removeCompactCopies(path, func(p string, size int64) {
		opts.Logger.Info("event store: removed the copy an interrupted db compact left", "path", p, "bytes", size)
	})
	if err != nil {
		opts.Logger.Warn("event store: cannot remove the copy an interrupted db compact left", "err", err)
	}
	s := &Store{
		path:      path,
		opened:    opened,
		openFile:  procPath(f),
		stopWatch: make(chan struct{}),
		db:        db,
		log:       opts.Logger,
		now:       opts.Now,
		maxBatch:  opts.MaxBatch,
		limits:    limits,
		observer:  opts.Observer,
		reqs:      make(chan *request, opts.MaxBatch),
		sandboxes: make(map[string]*entry),
		tails:     make(map[string]*entry),
		test:      test,
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.commitLoop()
	}()
	go func() {
		defer s.wg.Done()
		s.watchLoop(opts.WatchInterval)
	}()
	return s, nil
}

// Close commits what is already queued, materializes the WAL, stops the
// committer, wakes every waiter and closes the file. Writes after Close fail
// with ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	close(s.stopWatch)
	s.closeMu.Unlock()
	s.wg.Wait()

	s.mu.Lock()
	for _, e := range s.sandboxes {
		e.wake()
	}
	s.mu.Unlock()
	return s.db.Close()
}

// submit queues a write and waits for its outcome.
func (s *Store) submit(ctx context.Context, w write) error {
	r, err := s.enqueue(ctx, w)
	if err != nil {
		return err
	}
	return <-r.done
}

// enqueue hands a write to the committer. The context is honored while
// waiting for room in the queue and again when the committer picks the
// request up; once the request is in a transaction its outcome must be
// awaited, so the caller never returns while the committer may still touch
// its data.
func (s *Store) enqueue(ctx context.Context, w write) (*request, error) {
	r := &request{ctx: ctx, w: w, done: make(chan error, 1)}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := s.refused(w); err != nil {
		return nil, err
	}
	select {
	case s.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Append makes events durable in the log of sandbox id and folds them into
// its state; see sandbox.Store. Each event must be of a durable type; an
// empty SandboxID is set to id and a zero TS to the current time. The events
// must not be touched by another goroutine until Append returns, when each
// has its ID.
func (s *Store) Append(ctx context.Context, id string, events []*sandbox.Event, mutate func(*sandbox.State) error) error {
	w, err := s.newAppend(id, events, mutate)
	if err != nil {
		return err
	}
	if err := s.submit(ctx, w); err != nil {
		return err
	}
	w.assignIDs()
	return nil
}

func (s *Store) newAppend(id string, events []*sandbox.Event, mutate func(*sandbox.State) error) (*appendWrite, error) {
	if id == "" {
		return nil, notFound(id)
	}
	w := &appendWrite{
		id:     id,
		events: events,
		mutate: mutate,
		envs:   make([][]byte, len(events)),
		data:   make([][]byte, len(events)),
		folded: make([]any, len(events)),
		ids:    make([]uint64, len(events)),
	}
	for i, ev := range events {
		// Encoding here rather than in the committer spreads the work over
		// the callers' goroutines; the committer only adds the id. The
		// state folds a copy that holds exactly what a reader of the log
		// (or a WAL replay) decodes and shares no memory with the caller's
		// payload.
		data, err := sandbox.PrepareAppend(id, i, ev, s.now)
		if err != nil {
			return nil, err
		}
		folded, ok := foldCopy(ev.Type, ev.Data)
		if !ok {
			if folded, err = sandbox.DecodeData(ev.Type, data); err != nil {
				return nil, fmt.Errorf("append to %s: %w", id, err)
			}
		}
		if w.envs[i], ok = envelopeAfterID(ev, id, data); !ok {
			w.data[i] = data
		}
		w.folded[i] = folded
	}
	return w, nil
}

// Create stores a new sandbox; an existing id is a conflict.
func (s *Store) Create(ctx context.Context, sb sandbox.Sandbox, config []byte) error {
	if sb.ID == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "create sandbox: id is empty")
	}
	return s.submit(ctx, &createWrite{sb: sb.Clone(), config: append([]byte{}, config...)})
}

// Drop removes a sandbox whole: record, state, log.
func (s *Store) Drop(ctx context.Context, id string) error {
	if id == "" {
		return notFound(id)
	}
	return s.submit(ctx, &dropWrite{id: id})
}

// boltOptions are the options the store opens its file with.
func boltOptions(timeout time.Duration) *bbolt.Options {
	return &bbolt.Options{
		Timeout: timeout,
		// Each commit chooses whether to write the free-page list
		// (syncFreelistFor); until the first does, none is written.
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}
}

// syncFreelistFor sets whether the next commit writes bbolt's free-page
// list: while it holds at most limits.freelistMax pages, so that a file a
// crash leaves opens reading that list instead of bbolt scanning every
// page (see doc.go, The file under the store). A longer list, which a
// large prune leaves until appends take its pages again, would cost each
// commit its whole length. s.commitMu must be held: NoFreelistSync is read
// by the commit of the transaction that follows.
func (s *Store) syncFreelistFor() {
	st := s.db.Stats()
	s.db.NoFreelistSync = st.FreePageN+st.PendingPageN > s.limits.freelistMax
}

// syncFreelist writes the free-page list in a last commit, whatever its
// length, so that the next open reads it. The committer calls it once it
// has stopped: no other transaction writes meanwhile.
func (s *Store) syncFreelist() error {
	s.db.NoFreelistSync = false
	return s.updateDB(func(*bbolt.Tx) error { return nil })
}
