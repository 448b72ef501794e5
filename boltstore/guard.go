package boltstore

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// guard runs fn, a use of the file by bbolt, so that a fault in its
// mapping or a panic of bbolt's on the file's contents comes back as a
// DamagedError instead of ending the process. The check at open
// (verifyFile) leaves bbolt nothing to fail on in the pages it walks; this
// is for the pages it does not walk, for what it cannot see (a value bbolt
// decodes) and for a file changed under the store.
func guard(path string, log *slog.Logger, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if log != nil {
				log.Debug("event store: bbolt panicked on the file", "path", path, "panic", r, "stack", string(debug.Stack()))
			}
			err = &DamagedError{Path: path, Problem: fmt.Sprintf("bbolt failed reading it (%v)", r), serving: true, trace: string(debug.Stack())}
		}
	}()
	return fn()
}

// view runs fn in a read transaction under guard.
func (s *Store) view(fn func(*bbolt.Tx) error) error {
	return s.guarded(func() error { return s.db.View(fn) })
}

// updateDB runs fn in a write transaction under guard (see update).
func (s *Store) updateDB(fn func(*bbolt.Tx) error) error {
	return s.guarded(func() error { return update(s.db, fn) })
}

// update is bbolt's DB.Update but for a panic, in fn or in bbolt's commit
// (which reads pages to rebalance and frees those it rewrites), which it
// passes on once it has rolled the transaction back in memory, as an error
// of fn does. bbolt's Update rolls back a panic as it does a failed sync:
// it rebuilds the free-page list, which the store does not write at each
// commit, by scanning every page of the file, under the writer lock; on a
// damaged file that scan panics on a goroutine of its own, ending the
// process, or on this one, leaving the lock held. The free-page list in
// memory is what the transaction found, less its own allocations and
// frees: a file found damaged is written no more anyway (markDamaged).
func update(db *bbolt.DB, fn func(*bbolt.Tx) error) error {
	tx, err := db.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			_ = tx.Rollback()
			panic(r)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// guarded runs fn under guard; a DamagedError from it marks the store
// damaged (see markDamaged).
func (s *Store) guarded(fn func() error) error {
	err := guard(s.path, nil, fn)
	if d, ok := errors.AsType[*DamagedError](err); ok && d.serving {
		s.markDamaged(d)
	}
	return err
}

// errFileDamaged is the error of every write once the store has found its
// file damaged. Like errFileGone it reaches API clients, without the path.
var errFileDamaged = &sandbox.Error{Type: sandbox.EUnavailable,
	Message: "the event store cannot take writes: its database file is damaged (the server log says where and what to do); reads keep working where the file can be read"}

// markDamaged stops writes to a file found damaged while the store runs:
// a page bbolt could not read will not be read better by the next commit,
// and a file that lost pages may be losing more. Reads go on, failing
// where they meet the damage. One ERROR line says what happened and what
// to do, with bbolt's stack for the diagnosis.
func (s *Store) markDamaged(d *DamagedError) {
	if s.damaged.Swap(true) {
		return
	}
	if s.log != nil {
		s.log.Error("event store: the database file is damaged: "+d.Problem+". Writes are refused (503 unavailable) and /readyz fails; "+
			"reads go on where the file can be read. Stop the server, then run sparkles db check on a copy of the file and restore one that passes it",
			"path", s.path, "stack", d.trace)
	}
}
