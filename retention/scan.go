package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// scanPages is how many write batches of records a scan reads at a time.
// Reads take no write transaction, so they need not be as small.
const scanPages = 5

// track is what the loop remembers of one log between passes, so a pass
// reads only what is new, and nothing when nothing is due. It is lost on
// restart but for the compaction mark, which a Marker store keeps: the
// first pass then reads each log from its mark, its oldest record, and
// counts it only if it may hold more than MaxEvents (its ids say how many
// it can hold at most).
type track struct {
	pruned  uint64 // pruned_through as this loop last saw or set it
	counted uint64 // records with id <= counted are in count
	count   int    // retained records
	// countKnown says count holds every retained record up to counted;
	// unset, prune counts the log when its ids allow more than MaxEvents.
	countKnown bool
	compacted  uint64 // every finished turn up to this id is compacted
	marked     uint64 // the compaction mark the store holds (Marker)
	// oldestID and oldestTS are the first retained record as last read:
	// while it is still the first (oldest_event_id) and young, nothing is
	// old enough to prune by age, and no record need be read to know it.
	oldestID uint64
	oldestTS time.Time
	// open holds the turns the last compaction scan left open, which it
	// read through scanned: the next resumes there rather than at their
	// first event, so a running turn is read once, not at every pass.
	open    map[string]*openTurn
	scanned uint64
	// within is 1 + the last id of the log when it was last found within
	// MaxBytes (0: not known): a log that has not grown since still is,
	// and its size need not be asked for.
	within uint64
	// stale is set when a write removed fewer events than the loop asked
	// for (another node's pass removed them first): count no longer says
	// what is retained, and the sandbox is counted afresh next pass.
	stale bool
}

// openTurn collects the message.updated events of a turn seen in the log
// whose turn.completed is not seen yet.
type openTurn struct {
	first      uint64            // its first event, where the next scan resumes
	latest     map[string]uint64 // part id -> id of its latest message.updated
	superseded []uint64
}

// compact scans the records after the compaction mark, counts the new ones,
// and removes the superseded message.updated events of every turn that
// completed. A turn still running is left whole; the scan resumes at its
// first event next time.
func (l *Loop) compact(ctx context.Context, sb sandbox.Sandbox, t *track) (int, error) {
	last := uint64(sb.LastEventID)
	after := max(t.compacted, uint64(sb.PrunedThrough))
	open := map[string]*openTurn{}
	if t.open != nil && t.scanned >= after {
		after, open = t.scanned, t.open
	}
	if after >= last {
		return 0, nil
	}
	t.open = nil // kept again only if the scan completes
	var (
		victims []uint64
		scanned = after
	)
	err := l.scan(ctx, sb.ID, after, scanPages*l.cfg.Batch, func(rec sandbox.Record) (bool, error) {
		if rec.ID > last {
			return false, nil // appended after this pass began: next pass
		}
		scanned = rec.ID
		if t.countKnown && rec.ID > t.counted {
			t.count++
			t.counted = rec.ID
		}
		switch rec.Type {
		case sandbox.TypeTurnStarted, sandbox.TypeTurnCompleted, sandbox.TypeMessageUpdated:
		default:
			return true, nil
		}
		f, err := scanFieldsOf(rec)
		if err != nil {
			return false, fmt.Errorf("event %d: %w", rec.ID, err)
		}
		if f.TurnID == "" {
			return true, nil // outside any turn: nothing supersedes it
		}
		switch rec.Type {
		case sandbox.TypeTurnStarted:
			// Turns run one at a time: a turn left open when another
			// starts never completes, so it is never compacted.
			clear(open)
			open[f.TurnID] = &openTurn{first: rec.ID, latest: map[string]uint64{}}
		case sandbox.TypeTurnCompleted:
			if ot := open[f.TurnID]; ot != nil {
				victims = append(victims, ot.superseded...)
				delete(open, f.TurnID)
			}
		case sandbox.TypeMessageUpdated:
			ot := open[f.TurnID]
			if ot == nil {
				// The scan began inside this turn (a prune or a restart cut it).
				ot = &openTurn{first: rec.ID, latest: map[string]uint64{}}
				open[f.TurnID] = ot
			}
			if prev, ok := ot.latest[f.Data.PartID]; ok {
				ot.superseded = append(ot.superseded, prev)
			}
			ot.latest[f.Data.PartID] = rec.ID
		}
		return rec.ID < last, nil
	})
	if err != nil {
		return 0, err
	}
	mark := scanned
	for _, ot := range open {
		mark = min(mark, ot.first-1)
	}
	if len(open) > 0 {
		t.open, t.scanned = open, scanned
	}
	// A turn carried from an earlier scan may have lost its head to a
	// prune since.
	victims = slices.DeleteFunc(victims, func(id uint64) bool { return id <= uint64(sb.PrunedThrough) })
	removed := 0
	for i := 0; len(victims) > 0; i++ {
		n := min(len(victims), l.cfg.Batch)
		r, err := l.paced(ctx, i, func() (int, error) { return l.cfg.Store.Compact(ctx, sb.ID, victims[:n]) })
		removed += r
		t.count -= r
		t.stale = t.stale || r < n
		if err != nil {
			return removed, err
		}
		victims = victims[n:]
	}
	t.compacted = max(t.compacted, mark)
	return removed, nil
}

// prune removes the head of the log: every event older than cutoff, the
// oldest events beyond MaxEvents, and the oldest finished turns while the
// log holds more than MaxBytes (bytes.go). Ids are not dense (compaction
// removes from the middle), so the count cutoff is found by counting
// records, not ids.
func (l *Loop) prune(ctx context.Context, sb sandbox.Sandbox, t *track, cutoff time.Time) (int, error) {
	var logBytes uint64
	if t.within != uint64(sb.LastEventID)+1 {
		var err error
		if logBytes, _, err = l.cfg.Store.LogBytes(sb.ID); err != nil {
			return 0, err
		}
		if logBytes <= uint64(l.cfg.MaxBytes) {
			t.within = uint64(sb.LastEventID) + 1
		}
	}
	var current string
	if sb.CurrentTurn != nil {
		current = sb.CurrentTurn.ID
	}
	last := uint64(sb.LastEventID)
	upto, excess := t.counted, t.count-l.cfg.MaxEvents
	if !t.countKnown {
		// A log can hold at most one record per id after pruned_through.
		upto, excess = last, 0
		if last-min(last, t.pruned) > uint64(l.cfg.MaxEvents) {
			if err := l.count(ctx, sb, t); err != nil {
				return 0, err
			}
			upto, excess = t.counted, t.count-l.cfg.MaxEvents
		}
	}
	c := newCut(l.cfg.Batch, excess, cutoff, logBytes, uint64(l.cfg.MaxBytes), current)
	limit := scanPages * l.cfg.Batch
	if excess <= 0 && !c.bytes {
		if t.oldestID != 0 && t.oldestID == uint64(sb.OldestEventID) && !t.oldestTS.Before(cutoff) {
			return 0, nil // the oldest record is young: nothing is due
		}
		limit = 1 // usually the oldest event is young and one record says so
	}
	first := true
	err := l.scan(ctx, sb.ID, uint64(sb.PrunedThrough), limit, func(rec sandbox.Record) (bool, error) {
		if rec.ID > upto {
			return false, nil // not counted yet: left for the next pass
		}
		if first {
			first = false
			ts, err := recordTS(rec)
			if err != nil {
				return false, fmt.Errorf("event %d: %w", rec.ID, err)
			}
			t.oldestID, t.oldestTS = rec.ID, ts
		}
		more, err := c.visit(rec)
		return more && rec.ID < upto, err
	})
	if err != nil {
		return 0, err
	}
	bounds, covered := c.bounds()
	removed := 0
	for i, through := range bounds {
		// The count is of the records after t.pruned: sb.PrunedThrough
		// for the first batch, the bound of the last one for the next.
		from := t.pruned
		r, err := l.paced(ctx, i, func() (int, error) { return l.pruneBatch(ctx, sb.ID, from, through) })
		removed += r
		t.count -= r
		if err != nil {
			return removed, err
		}
		t.pruned = through
	}
	t.stale = t.stale || removed < covered
	if removed > 0 {
		l.log.Debug("pruned", "sandbox_id", sb.ID, "through", t.pruned, "removed", removed)
	}
	return removed, nil
}

// count counts the retained records of a log whose count the loop does not
// know, up to its last id when the pass began.
func (l *Loop) count(ctx context.Context, sb sandbox.Sandbox, t *track) error {
	last := uint64(sb.LastEventID)
	n, counted := 0, t.pruned
	err := l.scan(ctx, sb.ID, t.pruned, scanPages*l.cfg.Batch, func(rec sandbox.Record) (bool, error) {
		if rec.ID > last {
			return false, nil
		}
		n, counted = n+1, rec.ID
		return rec.ID < last, nil
	})
	if err != nil {
		return err
	}
	t.count, t.counted, t.countKnown = n, counted, true
	return nil
}

// pruneBatch prunes the log of sandbox id through the given id, on the
// condition, where the store can check it (FromPruner), that it is pruned
// through no further than from, where the count that found the cut began.
func (l *Loop) pruneBatch(ctx context.Context, id string, from, through uint64) (int, error) {
	if p, ok := l.cfg.Store.(FromPruner); ok {
		return p.PruneFrom(ctx, id, from, through, l.cfg.Batch)
	}
	return l.cfg.Store.Prune(ctx, id, through, l.cfg.Batch)
}

// restFactor is how many times as long as a write batch took the loop rests
// after it.
const restFactor = 2

// Scanner is what a Store may add to let scans read its records without
// copying them: Scan calls fn with up to limit retained records with id >
// after, in order; a record's JSON is valid only during the call. An error
// from fn ends the scan and is returned. A Store without it is read with
// Read.
type Scanner interface {
	Scan(ctx context.Context, id string, after uint64, limit int, fn func(sandbox.Record) error) error
}

// errStop ends a Scan early.
var errStop = errors.New("stop")

// scan calls fn with the retained records of sandbox id after the given id,
// in order, reading the first limit records, then pages of scanPages
// batches, until fn says to stop or a read finds nothing more. A short read
// is not the end: a store may page by size. fn must not keep a record's
// JSON.
func (l *Loop) scan(ctx context.Context, id string, after uint64, limit int, fn func(sandbox.Record) (bool, error)) error {
	for {
		n, stop := 0, false
		visit := func(rec sandbox.Record) error {
			n++
			after = rec.ID
			more, err := fn(rec)
			if err == nil && !more {
				stop, err = true, errStop
			}
			return err
		}
		var err error
		if sc, ok := l.cfg.Store.(Scanner); ok {
			err = sc.Scan(ctx, id, after, limit, visit)
		} else {
			var recs []sandbox.Record
			if recs, err = l.cfg.Store.Read(ctx, id, after, limit); err == nil {
				for _, rec := range recs {
					if err = visit(rec); err != nil {
						break
					}
				}
			}
		}
		if stop {
			return nil
		}
		if err != nil || n == 0 {
			return err
		}
		limit = scanPages * l.cfg.Batch
	}
}

// paced runs the i-th write batch of a series. Before every batch but the
// first it rests twice as long as the previous batch took (restFactor), so
// most commits of appends carry no batch: a long prune runs at about a
// third of the speed it could, appends at about theirs.
func (l *Loop) paced(ctx context.Context, i int, write func() (int, error)) (int, error) {
	if i > 0 {
		timer := time.NewTimer(restFactor * l.lastBatch)
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0, ctx.Err()
		case <-timer.C:
		}
	}
	start := time.Now()
	n, err := write()
	l.lastBatch = time.Since(start)
	l.heartbeat()
	return n, err
}

var tsField = []byte(`,"ts":"`)

// recordTS returns the ts of a record without decoding the rest of it: the
// envelope is written with ts early and in a fixed format.
func recordTS(rec sandbox.Record) (time.Time, error) {
	if i := bytes.Index(rec.JSON, tsField); i >= 0 {
		rest := rec.JSON[i+len(tsField):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			if ts, err := time.Parse(time.RFC3339Nano, string(rest[:j])); err == nil {
				return ts, nil
			}
		}
	}
	var v struct {
		TS time.Time `json:"ts"`
	}
	if err := json.Unmarshal(rec.JSON, &v); err != nil {
		return time.Time{}, fmt.Errorf("decode ts: %w", err)
	}
	return v.TS, nil
}

// scanFields is the little of an event that compaction needs.
type scanFields struct {
	TurnID string `json:"turn_id"`
	Data   struct {
		PartID string `json:"part_id"`
	} `json:"data"`
}

func scanFieldsOf(rec sandbox.Record) (scanFields, error) {
	var f scanFields
	if err := json.Unmarshal(rec.JSON, &f); err != nil {
		return f, fmt.Errorf("decode: %w", err)
	}
	return f, nil
}
