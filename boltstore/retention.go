package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Batch sizes when the caller gives none: a batch shares a commit with the
// appends queued beside it (see commitLoop) and should add little to it.
const (
	defaultPruneBatch = 200
	compactBatch      = 200
)

// Prune deletes every event of sandbox id with an id <= through, at most
// batch per transaction (default 200). Each batch advances pruned_through
// (to the highest id removed, never backwards) and oldest_event_id
// atomically with its deletes.
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
		if !w.more {
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

// LogBytes returns the bytes the retained log of sandbox id holds and those
// its current or last turn took (sandbox.State.LogBytes and TurnBytes):
// from memory when its state is loaded, else from the head of its state in
// the file, which is not kept in memory for it, so that a retention pass
// over every sandbox does not load every state. A sandbox whose state is
// not in memory has no WAL tail, so the file has its count; one a commit
// is changing as it is read may answer the count just before or after.
func (s *Store) LogBytes(id string) (log, turn uint64, err error) {
	s.mu.RLock()
	var st *sandbox.State
	if e := s.sandboxes[id]; e != nil {
		st = e.state
	}
	s.mu.RUnlock()
	if st != nil {
		return st.LogBytes, st.TurnBytes, nil
	}
	if id == "" {
		return 0, 0, notFound(id)
	}
	var head struct {
		Sandbox   sandbox.Marks `json:"sandbox"`
		LogBytes  uint64        `json:"log_bytes"`
		TurnBytes uint64        `json:"turn_bytes"`
	}
	err = s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if b == nil {
			return notFound(id)
		}
		if err := json.Unmarshal(stateHead(b), &head); err != nil {
			return fmt.Errorf("sandbox %s: decode state: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if head.LogBytes == 0 && head.Sandbox.OldestEventID != 0 {
		// A state from before the count: loading it counts it once.
		if _, st, err = s.loaded(id, true); err != nil {
			return 0, 0, err
		}
		return st.LogBytes, st.TurnBytes, nil
	}
	return head.LogBytes, head.TurnBytes, nil
}

// keyCompacted, in a sandbox's bucket, holds retention's compaction mark
// (8-byte big-endian id): every turn that completed at or before it is
// compacted. The loop writes it so that its first pass after a start
// resumes there instead of reading the whole log (retention.Marker).
var keyCompacted = []byte("compacted")

// CompactionMark returns the compaction mark of sandbox id, 0 when none was
// set.
func (s *Store) CompactionMark(id string) (uint64, error) {
	if id == "" {
		return 0, notFound(id)
	}
	var mark uint64
	err := s.view(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if b == nil {
			return notFound(id)
		}
		if v := b.Get(keyCompacted); len(v) == 8 {
			mark = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return mark, err
}

// SetCompactionMarks sets the compaction marks of several sandboxes in one
// write; sandboxes dropped since are skipped. The marks are no part of
// what readers see, so nothing is published or woken.
func (s *Store) SetCompactionMarks(ctx context.Context, marks map[string]uint64) error {
	if len(marks) == 0 {
		return nil
	}
	return s.submit(ctx, &markWrite{marks: marks})
}

type markWrite struct{ marks map[string]uint64 }

func (w *markWrite) apply(t *txn) (reqErr, txErr error) {
	for id, mark := range w.marks {
		if p := t.pending[id]; p != nil && p.dropped {
			continue
		}
		b := t.root.Bucket([]byte(id))
		if b == nil {
			continue
		}
		if err := b.Put(keyCompacted, binary.BigEndian.AppendUint64(nil, mark)); err != nil {
			return nil, err
		}
		t.dirty = true
	}
	return nil, nil
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
// read transaction, after materializing the WAL. Counting events walks each
// events bucket, so it is meant for the retention loop and diagnostics, not
// for request paths. Records only the WAL holds (appended since, or left by
// an unclean shutdown of a file read offline) are counted too.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	if err := s.flush(ctx); err != nil {
		return Stats{}, err
	}
	var st Stats
	var overlay map[string]*walStats
	err := s.view(func(tx *bbolt.Tx) error {
		st.FileSize = tx.Size()
		root := tx.Bucket(bucketSandboxes)
		var err error
		if overlay, err = readWALStats(tx); err != nil {
			return err
		}
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
			if w := overlay[ss.ID]; w != nil {
				ss.Events += len(w.ids)
				if n := len(w.ids); n > 0 {
					ss.LastEventID = w.ids[n-1]
					if ss.OldestEventID == 0 {
						ss.OldestEventID = w.ids[0]
					}
				}
				if w.status != "" {
					ss.Status = w.status
				}
			}
			st.Sandboxes = append(st.Sandboxes, ss)
			return nil
		})
	})
	dbs := s.db.Stats()
	st.FreePages, st.PendingPages = dbs.FreePageN, dbs.PendingPageN
	// The transaction may have seen a commit that is not yet published;
	// a sandbox in memory answers with its published values.
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := range st.Sandboxes {
		ss := &st.Sandboxes[i]
		if e := s.sandboxes[ss.ID]; e != nil {
			if w := overlay[ss.ID]; w != nil {
				for _, id := range w.ids {
					if id > uint64(e.sb.LastEventID) {
						ss.Events--
					}
				}
			}
			ss.Status = e.sb.Status
			ss.OldestEventID, ss.LastEventID, ss.PrunedThrough = uint64(e.sb.OldestEventID), uint64(e.sb.LastEventID), uint64(e.sb.PrunedThrough)
		}
	}
	return st, err
}

// walStats is what the WAL holds of one sandbox beyond its buckets.
type walStats struct {
	ids    []uint64
	status string // as the last mutate in the WAL left it
}

// readWALStats sums up the WAL entries that their sandboxes' buckets do not
// hold yet.
func readWALStats(tx *bbolt.Tx) (map[string]*walStats, error) {
	wal, root := tx.Bucket(bucketWAL), tx.Bucket(bucketSandboxes)
	if wal == nil {
		return nil, nil
	}
	out := make(map[string]*walStats)
	marks := make(map[string]uint64)
	err := eachWALEntry(wal, func(key uint64, ent walEntry) error {
		mark, ok := marks[ent.sandbox]
		if !ok {
			mark = math.MaxUint64 // a sandbox dropped since
			if b := root.Bucket([]byte(ent.sandbox)); b != nil {
				mark = readWALMark(b)
			}
			marks[ent.sandbox] = mark
		}
		if key <= mark {
			return nil
		}
		w := out[ent.sandbox]
		if w == nil {
			w = &walStats{}
			out[ent.sandbox] = w
		}
		for _, r := range ent.recs {
			w.ids = append(w.ids, r.id)
		}
		if ent.state != nil {
			var st struct {
				Sandbox struct {
					Status string `json:"status"`
				} `json:"sandbox"`
			}
			if err := json.Unmarshal(ent.state, &st); err != nil {
				return fmt.Errorf("WAL entry %d: decode state: %w", key, err)
			}
			w.status = st.Sandbox.Status
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// flush materializes the whole WAL. A Store without a committer (a file
// read offline) has nothing to flush.
func (s *Store) flush(ctx context.Context) error {
	if s.reqs == nil {
		return nil
	}
	err := s.submit(ctx, &flushWrite{})
	if errors.Is(err, ErrClosed) {
		return nil // the read that follows reports the closed file
	}
	return err
}

// Check materializes the WAL, then runs bbolt's consistency check over the
// whole file and checks the store's own layout (see checkLayout). It
// returns the first problem found, with the others joined after it, and
// ErrClosed after Close.
func (s *Store) Check() error {
	s.closeMu.RLock()
	closed := s.closed
	s.closeMu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := s.flush(context.Background()); err != nil {
		return err
	}
	return s.view(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() { // drain: the checker blocks on each send
			errs = append(errs, err)
		}
		errs = append(errs, checkLayout(tx)...)
		return errors.Join(errs...)
	})
}

// checkLayout checks what the store keeps true at every commit: each
// sandbox's meta and state agree on its watermarks, its state counts the
// bytes its events bucket holds, its events bucket's sequence is its last
// id and no key is above it; the WAL entries its buckets do not hold
// yet continue its ids densely from there; and the unsettled bucket lists
// exactly the sandboxes whose meta is not settled (checkUnsettled).
func checkLayout(tx *bbolt.Tx) []error {
	var errs []error
	wal, root := tx.Bucket(bucketWAL), tx.Bucket(bucketSandboxes)
	next := make(map[string]uint64) // the id the sandbox's next WAL record must have
	marks := make(map[string]uint64)
	open := make(map[string]bool) // each sandbox: whether its meta is unsettled
	err := root.ForEachBucket(func(k []byte) error {
		id, b := string(k), root.Bucket(k)
		events := b.Bucket(bucketEvents)
		if events == nil {
			errs = append(errs, fmt.Errorf("sandbox %s: events bucket missing", id))
			return nil
		}
		meta, err := readMarks(b, id)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		var sb sandbox.Sandbox
		if err := json.Unmarshal(b.Get(keyMeta), &sb); err == nil {
			open[id] = !sandbox.Settled(sb)
		}
		var st struct {
			Sandbox  sandbox.Marks `json:"sandbox"`
			LogBytes uint64        `json:"log_bytes"`
		}
		if err := decodeState(b, new(sandbox.State)); err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: decode state: %w", id, err))
		} else if err := json.Unmarshal(stateHead(b), &st); err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: decode state: %w", id, err))
		} else if st.Sandbox != meta {
			errs = append(errs, fmt.Errorf("sandbox %s: meta marks %+v, state marks %+v", id, meta, st.Sandbox))
		} else if held := countLogBytes(b); st.LogBytes != held && (st.LogBytes != 0 || meta.OldestEventID == 0) {
			// A state without the count was written before it existed:
			// its next load counts it (readState).
			errs = append(errs, fmt.Errorf("sandbox %s: state counts %d bytes of events, the events bucket holds %d", id, st.LogBytes, held))
		}
		seq := events.Sequence()
		if uint64(meta.LastEventID) != seq {
			errs = append(errs, fmt.Errorf("sandbox %s: last id %d, events sequence %d", id, meta.LastEventID, seq))
		}
		if k, _ := events.Cursor().Last(); k != nil && keyID(k) > seq {
			errs = append(errs, fmt.Errorf("sandbox %s: event %d above the sequence %d", id, keyID(k), seq))
		}
		if k, _ := events.Cursor().First(); uint64(meta.OldestEventID) != keyIDOrZero(k) {
			errs = append(errs, fmt.Errorf("sandbox %s: oldest id %d, first event %d", id, meta.OldestEventID, keyIDOrZero(k)))
		}
		next[id], marks[id] = seq+1, readWALMark(b)
		if wal != nil && marks[id] > wal.Sequence() {
			errs = append(errs, fmt.Errorf("sandbox %s: WAL mark %d beyond the WAL's %d", id, marks[id], wal.Sequence()))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkUnsettled(tx, open)...)
	if wal == nil {
		return errs
	}
	err = eachWALEntry(wal, func(key uint64, ent walEntry) error {
		mark, ok := marks[ent.sandbox]
		if !ok || key <= mark {
			return nil // a sandbox dropped since, or an entry its buckets hold
		}
		for _, r := range ent.recs {
			if r.id != next[ent.sandbox] {
				errs = append(errs, fmt.Errorf("WAL entry %d: sandbox %s: event %d where %d was next", key, ent.sandbox, r.id, next[ent.sandbox]))
			}
			next[ent.sandbox] = r.id + 1
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

func keyIDOrZero(k []byte) uint64 {
	if k == nil {
		return 0
	}
	return keyID(k)
}
