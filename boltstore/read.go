package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// closedChan is what Wait returns for a sandbox that does not exist: the caller
// wakes at once and learns from its next read that the sandbox is gone.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// loaded returns the entry of a sandbox, loading it from the file the first
// time, and its published state when withState is set. The returned state
// was taken under the lock together with the entry.
func (s *Store) loaded(id string, withState bool) (*entry, *sandbox.State, error) {
	s.mu.RLock()
	e := s.sandboxes[id]
	if e != nil && (!withState || e.state != nil) {
		st := e.state
		s.mu.RUnlock()
		return e, st, nil
	}
	s.mu.RUnlock()
	if id == "" {
		return nil, nil, notFound(id)
	}

	// With commitMu held no transaction sits between its commit and its
	// publication, so the file shows exactly what is published.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	var sb sandbox.Sandbox
	var st *sandbox.State
	err := s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if b == nil {
			return notFound(id)
		}
		var err error
		if withState {
			st, err = readState(b, id)
			if st != nil {
				sb = st.Sandbox
			}
			return err
		}
		sb, err = readMeta(b, id)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e = s.sandboxes[id]; e == nil {
		e = &entry{sb: sb}
		s.sandboxes[id] = e
	}
	if st != nil && e.state == nil {
		e.state = st
	}
	return e, e.state, nil
}

// Read returns up to limit retained events with id > after, in order; see
// sandbox.Store. The records only the WAL holds so far, the newest of the
// log, are served from memory; older ones cost one short read transaction,
// whose records are followed by those from memory where the bucket ends.
func (s *Store) Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error) {
	l, err := s.locate(id, after, limit)
	if err != nil || !l.file {
		return l.mem, err
	}
	recs := make([]sandbox.Record, 0, min(limit, 256))
	_, err = s.readFile(ctx, id, after, limit, l.upto, l.marks, true, func(rec sandbox.Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(recs, l.mem[:min(len(l.mem), limit-len(recs))]...), nil
}

// Scan calls fn with the records Read would return, in order, without
// copying them out of the file: a record's JSON is valid only during the
// call, and fn must not call the store. An error from fn ends the scan and
// is returned. It walks long logs (retention) without leaving garbage
// behind; each call is at most one short read transaction.
func (s *Store) Scan(ctx context.Context, id string, after uint64, limit int, fn func(sandbox.Record) error) error {
	l, err := s.locate(id, after, limit)
	if err != nil {
		return err
	}
	n := 0
	if l.file {
		// fn runs inside the guarded transaction: a panic of its own is
		// passed on as it is, not taken for a damaged file.
		var inner any
		call := func(rec sandbox.Record) (err error) {
			defer func() {
				if inner = recover(); inner != nil {
					err = errCallerPanicked
				}
			}()
			return fn(rec)
		}
		n, err = s.readFile(ctx, id, after, limit, l.upto, l.marks, false, call)
		if inner != nil {
			panic(inner)
		}
		if err != nil {
			return err
		}
	}
	return each(l.mem[:min(len(l.mem), limit-n)], fn)
}

var errCallerPanicked = errors.New("the caller's function panicked")

// located says where the records after a cursor are: in the file up to
// upto (when file is set), then in mem, which memory holds.
type located struct {
	file  bool
	upto  uint64
	marks sandbox.Marks // as published when the cursor was checked
	mem   []sandbox.Record
}

// locate checks the cursor and takes what memory holds of the up to limit
// records after it: all of them from the WAL tail, or the part of it that
// follows what the file must give.
func (s *Store) locate(id string, after uint64, limit int) (located, error) {
	if limit < 1 {
		return located{}, sandbox.Errorf(sandbox.EInvalidRequest, "read %s: limit must be at least 1, got %d", id, limit)
	}
	s.mu.RLock()
	e := s.sandboxes[id]
	if e == nil {
		s.mu.RUnlock()
		// Not in memory yet: loaded reads it from the file.
		var err error
		if e, _, err = s.loaded(id, false); err != nil {
			return located{}, err
		}
		s.mu.RLock()
	}
	defer s.mu.RUnlock()
	marks := e.sb.Marks()
	if err := marks.CheckCursor(id, after); err != nil {
		return located{}, err
	}
	// The bucket holds every retained record up to upto; the WAL tail
	// holds the rest. A cursor at or past upto needs nothing of the file,
	// so a stream at the head of a log the WAL no longer holds costs no
	// read transaction.
	l := located{upto: uint64(marks.LastEventID), marks: marks}
	if w := e.wal; w != nil && len(w.recs) > 0 {
		l.upto = w.recs[0].rec.ID - 1
		from := sort.Search(len(w.recs), func(i int) bool { return w.recs[i].rec.ID > after })
		for _, r := range w.recs[from:min(len(w.recs), from+limit)] {
			l.mem = append(l.mem, r.rec)
		}
	}
	l.file = after < l.upto
	return l, nil
}

func each(recs []sandbox.Record, fn func(sandbox.Record) error) error {
	for _, rec := range recs {
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// readFile calls fn with the events with after < id <= upto in the file, up
// to limit, and returns how many. Owned values are copied out inside the
// transaction, which ends before the caller writes anything anywhere; the
// others are valid during the call only. Records up to upto were published
// before the read began; anything newer the transaction may show is left to
// the caller.
func (s *Store) readFile(ctx context.Context, id string, after uint64, limit int, upto uint64, marks sandbox.Marks, owned bool, fn func(sandbox.Record) error) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	decode := viewRecord
	if owned {
		decode = decodeRecord
	}
	n := 0
	err := s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if b == nil {
			return notFound(id)
		}
		// The cursor is checked against the prune mark of this transaction:
		// a prune committed since the check in Read must not open a gap.
		// (A prune writes the sandbox's meta; appends through the WAL do
		// not, so the last id is the published one.)
		disk, err := readMarks(b, id)
		if err != nil {
			return err
		}
		if disk.PrunedThrough > marks.PrunedThrough {
			marks.PrunedThrough, marks.OldestEventID = disk.PrunedThrough, disk.OldestEventID
			if err := marks.CheckCursor(id, after); err != nil {
				return err
			}
		}
		events := b.Bucket(bucketEvents)
		if events == nil {
			return fmt.Errorf("sandbox %s: events bucket missing", id)
		}
		c := events.Cursor()
		prev := after
		for k, v := c.Seek(idKey(after + 1)); k != nil && n < limit; k, v = c.Next() {
			// The buckets below the top of the file are not checked at
			// open (see doc.go): a damaged page must not serve ids out of
			// order.
			if len(k) != 8 || keyID(k) <= prev {
				return &DamagedError{Path: s.path, Problem: fmt.Sprintf("the log of sandbox %s has an event key of %d bytes starting %x after %d", id, len(k), k[:min(len(k), 16)], prev), serving: true}
			}
			if keyID(k) > upto {
				break
			}
			prev = keyID(k)
			if err := s.checkValue(tx, v, "an event of sandbox "+id); err != nil {
				return err
			}
			rec, err := decode(k, v)
			if err != nil {
				return fmt.Errorf("sandbox %s: %w", id, err)
			}
			n++
			if err := fn(rec); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// Head returns the published tip of the log and the sandbox's status.
func (s *Store) Head(id string) (sandbox.Head, error) {
	s.mu.RLock()
	if e := s.sandboxes[id]; e != nil {
		h := sandbox.HeadOf(e.sb)
		s.mu.RUnlock()
		return h, nil
	}
	s.mu.RUnlock()
	e, _, err := s.loaded(id, false)
	if err != nil {
		return sandbox.Head{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sandbox.HeadOf(e.sb), nil
}

// Wait returns a channel closed by the next published change of sandbox id.
// For a sandbox that does not exist (or no longer does) the channel is
// already closed.
func (s *Store) Wait(id string) <-chan struct{} {
	s.mu.RLock()
	if e := s.sandboxes[id]; e != nil {
		defer s.mu.RUnlock()
		return e.waitChan()
	}
	s.mu.RUnlock()
	// Not in memory yet: loaded reads it from the file.
	e, _, err := s.loaded(id, false)
	if err != nil {
		return closedChan
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sandboxes[id] != e {
		return closedChan // dropped since loaded
	}
	return e.waitChan()
}

// State returns a copy of the published snapshot state.
func (s *Store) State(ctx context.Context, id string) (sandbox.State, error) {
	_, st, err := s.loaded(id, true)
	if err != nil {
		return sandbox.State{}, err
	}
	return *st.Clone(), nil
}

// Sandbox returns the published sandbox resource with its watermarks.
func (s *Store) Sandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	e, _, err := s.loaded(id, false)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return e.sb.Clone(), nil
}

// Sandboxes lists sandboxes in id order, which is creation order.
func (s *Store) Sandboxes(ctx context.Context, after string, limit int) ([]sandbox.Sandbox, bool, error) {
	if limit < 1 {
		return nil, false, sandbox.Errorf(sandbox.EInvalidRequest, "list sandboxes: limit must be at least 1, got %d", limit)
	}
	var list []sandbox.Sandbox
	more := false
	err := s.view(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketSandboxes).Cursor()
		k, v := c.First()
		if after != "" {
			if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if v != nil {
				continue // only nested buckets are sandboxes
			}
			if len(list) == limit {
				more = true
				return nil
			}
			sb, err := readMeta(tx.Bucket(bucketSandboxes).Bucket(k), string(k))
			if err != nil {
				return err
			}
			list = append(list, sb)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	// A sandbox in memory may have a commit in flight that the transaction
	// already saw; its published values are the ones a reader may act on.
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := range list {
		if e := s.sandboxes[list[i].ID]; e != nil {
			list[i] = e.sb.Clone()
		}
	}
	return list, more, nil
}

// Config returns the private config given to Create.
func (s *Store) Config(ctx context.Context, id string) ([]byte, error) {
	var config []byte
	err := s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if b == nil {
			return notFound(id)
		}
		v := b.Get(keyConfig)
		if err := s.checkValue(tx, v, "the config of sandbox "+id); err != nil {
			return err
		}
		config = bytes.Clone(v)
		return nil
	})
	return config, err
}

// Turn returns a turn of a sandbox by id.
func (s *Store) Turn(ctx context.Context, sandboxID, turnID string) (sandbox.Turn, error) {
	s.mu.RLock()
	if e := s.sandboxes[sandboxID]; e != nil && e.wal != nil {
		if t := e.wal.turns[turnID]; t != nil {
			c := t.Clone()
			s.mu.RUnlock()
			return *c, nil
		}
	}
	s.mu.RUnlock()
	var t sandbox.Turn
	err := s.resource(sandboxID, bucketTurns, turnID, "turn", &t)
	return t, err
}

// Approval returns an approval of a sandbox by id.
func (s *Store) Approval(ctx context.Context, sandboxID, approvalID string) (sandbox.Approval, error) {
	s.mu.RLock()
	if e := s.sandboxes[sandboxID]; e != nil && e.wal != nil {
		if a := e.wal.approvals[approvalID]; a != nil {
			c := *a
			c.Decision, c.OptionID = sandbox.ClonePtr(a.Decision), sandbox.ClonePtr(a.OptionID)
			s.mu.RUnlock()
			return c, nil
		}
	}
	s.mu.RUnlock()
	var a sandbox.Approval
	err := s.resource(sandboxID, bucketApprovals, approvalID, "approval", &a)
	return a, err
}

// resource reads a turn or an approval from the file. One changed since the
// sandbox was last materialized is in its WAL tail, which Turn and Approval
// look at first: a resource leaves the tail only once the file has it.
func (s *Store) resource(sandboxID string, bucket []byte, id, kind string, v any) error {
	return s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, sandboxID)
		if b == nil {
			return notFound(sandboxID)
		}
		var data []byte
		if rb := b.Bucket(bucket); rb != nil && id != "" {
			data = rb.Get([]byte(id))
		}
		if data == nil {
			return sandbox.Errorf(sandbox.ENotFound, "%s %s not found in sandbox %s", kind, id, sandboxID)
		}
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("sandbox %s: decode %s %s: %w", sandboxID, kind, id, err)
		}
		return nil
	})
}

// checkValue refuses as damage a value that bbolt gives a length longer
// than the whole file: a damaged leaf can claim a value of gigabytes,
// and copying it would allocate that much (and, under the race detector,
// several times that) before the read faulted at the end of the file.
func (s *Store) checkValue(tx *bbolt.Tx, v []byte, what string) error {
	if size := tx.Size(); int64(len(v)) > size {
		return &DamagedError{Path: s.path, Problem: fmt.Sprintf("%s is %d bytes long in a file of %d bytes", what, len(v), size), serving: true}
	}
	return nil
}
