package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var _ coordinator.Store = (*Store)(nil)

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("event store is closed")

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// Timeout bounds the wait for the file lock (default 1s), so a second
	// process on the same file fails at once instead of hanging.
	Timeout time.Duration
	Logger  *slog.Logger
	// CacheSize is how many recent records of each sandbox are kept in
	// memory for streams at the tail (default 1024).
	CacheSize int
	// MaxBatch bounds the writes committed in one transaction (default 1024).
	MaxBatch int
	// Now stamps events appended without a ts (default time.Now).
	Now func() time.Time
}

// Store is the bbolt implementation of coordinator.Store. See doc.go for
// the layout and the write path.
type Store struct {
	db        *bbolt.DB
	log       *slog.Logger
	now       func() time.Time
	cacheSize int
	maxBatch  int

	reqs    chan *request
	closeMu sync.RWMutex // held for reading while a request is queued
	closed  bool
	wg      sync.WaitGroup

	// commitMu is held by the committer from the start of a transaction
	// until its result is published, and by readers that load a sandbox
	// from the file, so a load never sees a commit before it is published.
	commitMu sync.Mutex

	mu        sync.Mutex
	sandboxes map[string]*entry // the sandboxes loaded so far

	// afterCommit, when set, runs after each transaction has committed and
	// before it is published, with the last id of every sandbox it changed.
	// Tests use it to know which ids were durable when a reader saw them.
	afterCommit func(last map[string]uint64)
}

// entry is the published, in-memory side of one sandbox. Its fields are
// guarded by Store.mu; sb and state are never changed in place, only
// replaced, so a reader may keep what it took under the lock.
type entry struct {
	sb    sandbox.Sandbox
	state *sandbox.State // nil until first needed, and after a failed commit
	ring  ring
	wait  chan struct{} // made on demand, closed by the next change
}

func (e *entry) wake() {
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
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

// Open opens (or creates) the store file at path and starts its committer.
func Open(path string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 1024
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.Timeout})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("event store %s is in use by another sparkles process; stop that process or use another data dir (%w)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open event store %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketSandboxes)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot initialize event store %s: %w", path, err)
	}
	s := &Store{
		db:        db,
		log:       opts.Logger,
		now:       opts.Now,
		cacheSize: opts.CacheSize,
		maxBatch:  opts.MaxBatch,
		reqs:      make(chan *request, opts.MaxBatch),
		sandboxes: make(map[string]*entry),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.commitLoop()
	}()
	return s, nil
}

// Close commits what is already queued, stops the committer, wakes every
// waiter and closes the file. Writes after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
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
	select {
	case s.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commitLoop runs one transaction for the first waiting request and every
// other one already queued. There is no delay to gather a batch: whatever
// arrived while the previous commit was syncing makes the next one.
func (s *Store) commitLoop() {
	batch := make([]*request, 0, s.maxBatch)
	for r := range s.reqs {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < s.maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commit(batch)
		clear(batch)
	}
}

// errNothingToCommit rolls back a transaction in which every request failed
// on its own, which saves the fsync.
var errNothingToCommit = errors.New("nothing to commit")

func (s *Store) commit(batch []*request) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()

	t := &txn{s: s, pending: make(map[string]*pending)}
	errs := make([]error, len(batch))
	err := s.db.Update(func(tx *bbolt.Tx) error {
		t.root = tx.Bucket(bucketSandboxes)
		for i, r := range batch {
			if err := r.ctx.Err(); err != nil {
				errs[i] = err
				continue
			}
			reqErr, txErr := r.w.apply(t)
			if txErr != nil {
				return txErr
			}
			errs[i] = reqErr
		}
		if !t.dirty {
			return errNothingToCommit
		}
		return t.flush()
	})
	switch {
	case errors.Is(err, errNothingToCommit):
	case err != nil:
		s.log.Error("event store commit failed", "requests", len(batch), "err", err)
		s.forget(t)
		err = fmt.Errorf("commit to event store: %w", err)
		for i := range errs {
			errs[i] = err
		}
	default:
		if s.afterCommit != nil {
			s.afterCommit(t.lastIDs())
		}
		s.publish(t)
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}

// publish makes a committed transaction visible: resources, states, recent
// records and watermarks change together under one lock, then waiters wake.
func (s *Store) publish(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range t.order {
		e := s.sandboxes[p.id]
		if p.dropped {
			if e != nil {
				e.wake()
				delete(s.sandboxes, p.id)
			}
			continue
		}
		if !p.changed {
			continue
		}
		if p.created || e == nil {
			if e != nil {
				e.wake()
			}
			e = &entry{ring: ring{from: p.base + 1}}
			s.sandboxes[p.id] = e
		}
		e.sb, e.state = p.state.Sandbox, p.state
		for _, rec := range p.recs {
			e.ring.push(rec, s.cacheSize)
		}
		// A record leaves the cache in the same critical section that
		// publishes the watermark which removes it, so the cache never
		// serves a pruned or compacted record.
		if p.pruned {
			through := uint64(p.state.Sandbox.PrunedThrough)
			e.ring.remove(func(id uint64) bool { return id <= through })
		}
		if len(p.compacted) > 0 {
			e.ring.remove(func(id uint64) bool { _, ok := p.compacted[id]; return ok })
		}
		e.wake()
	}
}

// forget drops the cached states a failed transaction touched. Nothing of it
// was published, but reloading from the file keeps the cache provably equal
// to what is on disk.
func (s *Store) forget(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range t.order {
		if e := s.sandboxes[p.id]; e != nil {
			e.state = nil
		}
	}
}

// Append makes events durable in the log of sandbox id and folds them into
// its state; see coordinator.Store. Each event must be of a durable type; an
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
		data:   make([][]byte, len(events)),
		folded: make([]any, len(events)),
		ids:    make([]uint64, len(events)),
	}
	for i, ev := range events {
		if ev == nil {
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "append to %s: event %d is nil", id, i)
		}
		if !ev.Type.Durable() {
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "append to %s: %q events are transient and never stored", id, ev.Type)
		}
		if ev.SandboxID == "" {
			ev.SandboxID = id
		} else if ev.SandboxID != id {
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "append to %s: event belongs to sandbox %s", id, ev.SandboxID)
		}
		if ev.TS.IsZero() {
			ev.TS = s.now()
		}
		// Encoding here rather than in the committer spreads the work over
		// the callers' goroutines. The state folds a decoded copy, so it is
		// exactly what a reader of the log folds and shares no memory with
		// the caller's payload.
		data, err := json.Marshal(ev.Data)
		if err != nil {
			return nil, fmt.Errorf("append to %s: encode %s data: %w", id, ev.Type, err)
		}
		if string(data) == "null" {
			data = []byte("{}")
		}
		folded, err := sandbox.DecodeData(ev.Type, data)
		if err != nil {
			return nil, fmt.Errorf("append to %s: %w", id, err)
		}
		w.data[i], w.folded[i] = data, folded
	}
	return w, nil
}

// Create stores a new sandbox; an existing id is a conflict.
func (s *Store) Create(ctx context.Context, sb sandbox.Sandbox, config []byte) error {
	if sb.ID == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "create sandbox: id is empty")
	}
	return s.submit(ctx, &createWrite{sb: cloneSandbox(sb), config: append([]byte{}, config...)})
}

// Drop removes a sandbox whole: record, state, log.
func (s *Store) Drop(ctx context.Context, id string) error {
	if id == "" {
		return notFound(id)
	}
	return s.submit(ctx, &dropWrite{id: id})
}
