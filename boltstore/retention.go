package boltstore

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/bbolt"
)

// Batch sizes when the caller gives none: small enough that appends queued
// behind a retention transaction wait for milliseconds, not seconds.
const (
	defaultPruneBatch = 1000
	compactBatch      = 1000
)

// Prune deletes every event of sandbox id with an id <= through, at most
// batch per transaction (default 1000), so appends keep flowing between
// batches. Each batch advances pruned_through (to the highest id removed,
// never backwards) and oldest_event_id atomically with its deletes.
func (s *Store) Prune(ctx context.Context, id string, through uint64, batch int) (removed int, err error) {
	if id == "" {
		return 0, notFound(id)
	}
	if batch < 1 {
		batch = defaultPruneBatch
	}
	for {
		w := &pruneWrite{id: id, through: through, batch: batch}
		if err := s.submit(ctx, w); err != nil {
			return removed, err
		}
		removed += w.removed
		if w.removed < batch {
			return removed, nil
		}
	}
}

// Compact deletes the given events from anywhere in the log of sandbox id
// (superseded message snapshots of finished turns). Ids that are not in the
// log are skipped. pruned_through does not move; oldest_event_id does when
// the first retained event goes.
func (s *Store) Compact(ctx context.Context, id string, ids []uint64) (removed int, err error) {
	if id == "" {
		return 0, notFound(id)
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for chunk := range slices.Chunk(ids, compactBatch) {
		w := &compactWrite{id: id, ids: chunk}
		if err := s.submit(ctx, w); err != nil {
			return removed, err
		}
		removed += w.removed
	}
	return removed, nil
}

// Stats describes the file and every sandbox in it.
type Stats struct {
	FileSize     int64 // bytes
	FreePages    int   // pages free for reuse
	PendingPages int   // pages freed but still held by open readers
	Sandboxes    []SandboxStats
}

// SandboxStats describes one sandbox's log.
type SandboxStats struct {
	ID            string
	Status        string
	Events        int // retained events
	OldestEventID uint64
	LastEventID   uint64
	PrunedThrough uint64
}

// Stats reads the file's size and free pages and every sandbox's log in one
// read transaction. Counting events walks each events bucket, so it is meant
// for the retention loop and diagnostics, not for request paths.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.db.View(func(tx *bbolt.Tx) error {
		st.FileSize = tx.Size()
		root := tx.Bucket(bucketSandboxes)
		return root.ForEachBucket(func(k []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := root.Bucket(k)
			sb, err := readMeta(b, string(k))
			if err != nil {
				return err
			}
			ss := SandboxStats{
				ID:            string(k),
				Status:        sb.Status,
				OldestEventID: uint64(sb.OldestEventID),
				LastEventID:   uint64(sb.LastEventID),
				PrunedThrough: uint64(sb.PrunedThrough),
			}
			if events := b.Bucket(bucketEvents); events != nil {
				ss.Events = events.Stats().KeyN
			}
			st.Sandboxes = append(st.Sandboxes, ss)
			return nil
		})
	})
	dbs := s.db.Stats()
	st.FreePages, st.PendingPages = dbs.FreePageN, dbs.PendingPageN
	return st, err
}

// Check runs bbolt's consistency check over the whole file and returns the
// first problem found, with the others joined after it.
func (s *Store) Check() error {
	return s.db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() { // drain: the checker blocks on each send
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
