// Package faultstore is an event store for the reliability tests: a real
// boltstore whose writes are refused on command, from a chosen moment
// until Heal, with the errors a full disk or an unreachable store give. A
// refused write never reaches the boltstore, as a failed commit leaves
// nothing behind, so what the log holds afterwards is exactly what the
// coordinator wrote again once the store healed.
package faultstore

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"syscall"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The errors of the two outages the coordinator must live through, shaped
// as the stores give them.
var (
	// ErrDiskFull is a commit whose pages could not be written.
	ErrDiskFull = fmt.Errorf("commit to event store: %w", &fs.PathError{Op: "write", Path: "sparkles.db", Err: syscall.ENOSPC})
	// ErrUnreachable is a write to a store on the network whose server is
	// gone: no acknowledgement came in time.
	ErrUnreachable = fmt.Errorf("append: publish: no acknowledgement: %w", context.DeadlineExceeded)
)

// Match chooses the append from which writes fail (see FailFrom).
type Match func(sandboxID string, evs []*sandbox.Event) bool

// Store is a boltstore that refuses writes on command. Everything that
// does not write (and retention's writes) goes to the boltstore untouched.
type Store struct {
	*boltstore.Store

	mu      sync.Mutex
	err     error // writes fail with it; nil while they go through
	from    Match // arms armed at the first append it matches
	only    Match // appends it matches fail with armed, the others go through
	armed   error
	refused []*sandbox.Event // events of refused appends, first refusal order, once each
	seen    map[*sandbox.Event]bool
	count   int           // refused writes
	changed chan struct{} // closed at the next refusal
}

// New wraps s.
func New(s *boltstore.Store) *Store {
	return &Store{Store: s, seen: map[*sandbox.Event]bool{}, changed: make(chan struct{})}
}

// Fail makes every write fail with err from now on, until Heal.
func (s *Store) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.from, s.only = err, nil, nil
}

// FailFrom makes writes fail with err from the first append that m
// matches on, that one included, until Heal: a disk that fills at a chosen
// moment of a turn.
func (s *Store) FailFrom(err error, m Match) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.from, s.only, s.armed = nil, m, nil, err
}

// FailOnly makes the appends m matches fail with err, every time, until
// Heal, and lets the others through: a disk with room for small writes
// only, or a store that refuses some writes and not others.
func (s *Store) FailOnly(err error, m Match) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.from, s.only, s.armed = nil, nil, m, err
}

// Heal lets writes through again.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.from, s.only = nil, nil, nil
}

// Refused returns how many writes failed so far, and a channel closed at
// the next refusal.
func (s *Store) Refused() (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, s.changed
}

// RefusedEvents returns the events of every refused append, in the order
// they were first refused and once each, however often they were retried.
// Once appended, each carries the id the log gave it.
func (s *Store) RefusedEvents() []*sandbox.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*sandbox.Event(nil), s.refused...)
}

// check says whether a write fails, and counts it if so.
func (s *Store) check(id string, evs []*sandbox.Event, isAppend bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && s.from != nil && isAppend && s.from(id, evs) {
		s.err, s.from = s.armed, nil
	}
	err := s.err
	if err == nil && s.only != nil && isAppend && s.only(id, evs) {
		err = s.armed
	}
	if err == nil {
		return nil
	}
	for _, ev := range evs {
		if !s.seen[ev] {
			s.seen[ev] = true
			s.refused = append(s.refused, ev)
		}
	}
	s.count++
	close(s.changed)
	s.changed = make(chan struct{})
	return err
}

// Append fails while writes fail; see sandbox.Store.
func (s *Store) Append(ctx context.Context, id string, evs []*sandbox.Event, mutate func(*sandbox.State) error) error {
	if err := s.check(id, evs, true); err != nil {
		return err
	}
	return s.Store.Append(ctx, id, evs, mutate)
}

// Create fails while writes fail.
func (s *Store) Create(ctx context.Context, sb sandbox.Sandbox, config []byte) error {
	if err := s.check(sb.ID, nil, false); err != nil {
		return err
	}
	return s.Store.Create(ctx, sb, config)
}

// Drop fails while writes fail.
func (s *Store) Drop(ctx context.Context, id string) error {
	if err := s.check(id, nil, false); err != nil {
		return err
	}
	return s.Store.Drop(ctx, id)
}

// HasType is a Match for the first append that carries an event of typ.
func HasType(typ sandbox.Type) Match {
	return func(_ string, evs []*sandbox.Event) bool {
		for _, ev := range evs {
			if ev.Type == typ {
				return true
			}
		}
		return false
	}
}
