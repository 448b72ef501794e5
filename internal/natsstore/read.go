package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// closedChan is what Wait returns for a sandbox that does not exist: the
// caller wakes at once and learns from its next read that it is gone.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// readBytes bounds the bytes of one read from the stream; a page cut short
// by it is still in order, and the caller pages on.
const readBytes = 8 << 20

// Create stores a new sandbox; an existing id is a conflict. The config
// goes first: a sandbox exists once its state does, and then its config is
// always there.
func (s *Store) Create(ctx context.Context, sb sandbox.Sandbox, config []byte) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if sb.ID == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "create sandbox: id is empty")
	}
	if !validID(sb.ID) {
		return sandbox.Errorf(sandbox.EInvalidRequest, "create sandbox: id %q has characters other than letters, digits, _ and -", sb.ID)
	}
	if err := s.refuse(true); err != nil {
		return err
	}
	rctx, done := s.begin(ctx, true)
	defer func() { err = done(err) }()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	ctx, cut := s.cutOffWrites(ctx)
	defer cut()
	id := sb.ID
	// The look-up is given up as soon as NATS is found unreachable, the
	// writes after it a little later (see reach.go).
	if _, err := s.kv.Get(rctx, stateKey(id)); err == nil {
		return sandbox.Errorf(sandbox.EConflict, "sandbox %s already exists", id)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if _, err := s.kv.Put(ctx, configKey(id), config); err != nil {
		return fmt.Errorf("create sandbox %s: store config: %w", id, err)
	}
	st := &sandbox.State{Sandbox: sb.Clone()}
	st.Sandbox.LastEventID, st.Sandbox.OldestEventID, st.Sandbox.PrunedThrough = 0, 0, 0
	// A node creates a sandbox holding its lease: the fence it put up
	// then is the first owner.
	s.mu.Lock()
	owner := s.holds[id]
	s.mu.Unlock()
	data, err := encodeState(st, owner)
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", id, err)
	}
	rev, err := s.kv.Create(ctx, stateKey(id), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return sandbox.Errorf(sandbox.EConflict, "sandbox %s already exists", id)
	}
	if err != nil {
		return fmt.Errorf("create sandbox %s: store state: %w", id, err)
	}
	s.observe(id, st.Sandbox, st, owner, rev)
	return nil
}

// Read returns up to limit retained events with id > after, in order; see
// sandbox.Store. The cursor is checked against the watermarks this
// process knows, and the page is bounded by its last id, so a reader never
// sees an event that the state it was shown does not account for. One read
// is one round trip to the server.
func (s *Store) Read(ctx context.Context, id string, after uint64, limit int) (_ []sandbox.Record, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit < 1 {
		return nil, sandbox.Errorf(sandbox.EInvalidRequest, "read %s: limit must be at least 1, got %d", id, limit)
	}
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	marks := s.marks(e)
	if after > uint64(marks.LastEventID) {
		// The cursor may come from a process this one has not heard from
		// yet; ask the bucket's leader before calling it stale.
		if e, _, err = s.fetchLatest(ctx, id); err != nil {
			return nil, err
		}
		marks = s.marks(e)
	}
	if err := marks.CheckCursor(id, after); err != nil {
		return nil, err
	}
	from := max(after, uint64(marks.PrunedThrough)) + 1
	last := uint64(marks.LastEventID)
	if from > last {
		return nil, nil
	}
	msgs, err := s.getBatch(ctx, s.subject(id), from, limit, readBytes, last)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	recs := make([]sandbox.Record, 0, len(msgs))
	for _, msg := range msgs {
		seq, err := msgSeq(msg)
		if err != nil {
			return nil, err
		}
		if seq > last {
			break
		}
		rec, err := recordOf(seq, msg.Data)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
		recs = append(recs, rec)
	}
	// A prune by this process while the page was read moved the watermark
	// before it removed anything: check the cursor again against it.
	if now := s.marks(e); now.PrunedThrough > marks.PrunedThrough {
		if err := now.CheckCursor(id, after); err != nil {
			return nil, err
		}
		recs = slices.DeleteFunc(recs, func(r sandbox.Record) bool { return r.ID <= uint64(now.PrunedThrough) })
	}
	return recs, nil
}

func (s *Store) marks(e *entry) sandbox.Marks {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.sb.Marks()
}

// Head returns the tip of the log and the sandbox's status as this process
// knows them: its own writes at once, other processes' as the bucket's
// watch delivers them.
func (s *Store) Head(id string) (sandbox.Head, error) {
	if err := s.enter(); err != nil {
		return sandbox.Head{}, err
	}
	defer s.leave()
	ctx, done := s.begin(context.Background(), false)
	e, err := s.lookup(ctx, id)
	if err = done(err); err != nil {
		return sandbox.Head{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return sandbox.HeadOf(e.sb), nil
}

// Wait returns a channel closed by the next change of sandbox id that this
// process learns of, its own or another process's. For a sandbox that does
// not exist (or no longer does), and after Close, it is already closed.
func (s *Store) Wait(id string) <-chan struct{} {
	if err := s.enter(); err != nil {
		return closedChan
	}
	defer s.leave()
	ctx, done := s.begin(context.Background(), false)
	e, err := s.lookup(ctx, id)
	if done(err) != nil {
		return closedChan
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.gone {
		return closedChan
	}
	if e.wait == nil {
		e.wait = make(chan struct{})
	}
	return e.wait
}

// State returns a copy of the snapshot state. It is read from the bucket
// unless this process holds the latest revision it knows of; either way
// Head and Read afterwards are at least as new, so a snapshot followed by
// a replay from its last_event_id has no gap.
func (s *Store) State(ctx context.Context, id string) (_ sandbox.State, err error) {
	if err := s.enter(); err != nil {
		return sandbox.State{}, err
	}
	defer s.leave()
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return sandbox.State{}, err
	}
	s.mu.Lock()
	st := e.state
	s.mu.Unlock()
	if st == nil {
		_, cur, err := s.fetch(ctx, id)
		if err != nil {
			return sandbox.State{}, err
		}
		st = cur.st
	}
	return *st.Clone(), nil
}

// Sandbox returns the sandbox resource with its watermarks.
func (s *Store) Sandbox(ctx context.Context, id string) (_ sandbox.Sandbox, err error) {
	if err := s.enter(); err != nil {
		return sandbox.Sandbox{}, err
	}
	defer s.leave()
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	e, err := s.lookup(ctx, id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.sb.Clone(), nil
}

// Sandboxes lists sandboxes in id order, which is creation order, from
// memory: every process learns every sandbox from the bucket's watch.
func (s *Store) Sandboxes(ctx context.Context, after string, limit int) ([]sandbox.Sandbox, bool, error) {
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	defer s.leave()
	if limit < 1 {
		return nil, false, sandbox.Errorf(sandbox.EInvalidRequest, "list sandboxes: limit must be at least 1, got %d", limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, found := slices.BinarySearch(s.ids, after)
	if found {
		i++
	}
	end := min(i+limit, len(s.ids))
	list := make([]sandbox.Sandbox, 0, end-i)
	for _, id := range s.ids[i:end] {
		list = append(list, (s.sandboxes[id].sb).Clone())
	}
	return list, end < len(s.ids), nil
}

// Config returns the private config given to Create.
func (s *Store) Config(ctx context.Context, id string) (_ []byte, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if !validID(id) {
		return nil, notFound(id)
	}
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := s.lookup(ctx, id); err != nil {
		return nil, err
	}
	kve, err := s.kv.Get(ctx, configKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: read config: %w", id, err)
	}
	return kve.Value(), nil
}

// Turn returns a turn of a sandbox by id.
func (s *Store) Turn(ctx context.Context, sandboxID, turnID string) (sandbox.Turn, error) {
	var t sandbox.Turn
	err := s.resource(ctx, sandboxID, turnID, turnKey, "turn", &t)
	return t, err
}

// Approval returns an approval of a sandbox by id.
func (s *Store) Approval(ctx context.Context, sandboxID, approvalID string) (sandbox.Approval, error) {
	var a sandbox.Approval
	err := s.resource(ctx, sandboxID, approvalID, approvalKey, "approval", &a)
	return a, err
}

func (s *Store) resource(ctx context.Context, sandboxID, id string, key func(string, string) string, kind string, v any) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := s.lookup(ctx, sandboxID); err != nil {
		return err
	}
	if !validID(id) {
		return sandbox.Errorf(sandbox.ENotFound, "%s %s not found in sandbox %s", kind, id, sandboxID)
	}
	kve, err := s.kv.Get(ctx, key(sandboxID, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return sandbox.Errorf(sandbox.ENotFound, "%s %s not found in sandbox %s", kind, id, sandboxID)
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: read %s %s: %w", sandboxID, kind, id, err)
	}
	if err := json.Unmarshal(kve.Value(), v); err != nil {
		return fmt.Errorf("sandbox %s: decode %s %s: %w", sandboxID, kind, id, err)
	}
	return nil
}
