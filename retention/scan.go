package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// track is what the loop remembers of one log between passes, so a pass
// reads only what is new. It is lost on restart; the first pass then reads
// every log once.
type track struct {
	pruned    uint64 // pruned_through as this loop last saw or set it
	counted   uint64 // records with id <= counted are in count
	count     int    // retained records
	compacted uint64 // every finished turn up to this id is compacted
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
	if after >= last {
		return 0, nil
	}
	var (
		open    = map[string]*openTurn{}
		victims []uint64
		scanned = after
	)
	for scanned < last {
		recs, err := l.cfg.Store.Read(ctx, sb.ID, scanned, l.cfg.Batch)
		if err != nil {
			return 0, err
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			if rec.ID > last {
				break // appended after this pass began: next pass
			}
			scanned = rec.ID
			if rec.ID > t.counted {
				t.count++
				t.counted = rec.ID
			}
			switch rec.Type {
			case sandbox.TypeTurnStarted, sandbox.TypeTurnCompleted, sandbox.TypeMessageUpdated:
			default:
				continue
			}
			f, err := scanFieldsOf(rec)
			if err != nil {
				return 0, fmt.Errorf("event %d: %w", rec.ID, err)
			}
			if f.TurnID == "" {
				continue // outside any turn: nothing supersedes it
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
		}
		if recs[len(recs)-1].ID >= last || len(recs) < l.cfg.Batch {
			break
		}
	}
	mark := scanned
	for _, ot := range open {
		mark = min(mark, ot.first-1)
	}
	removed := 0
	for i := 0; len(victims) > 0; i++ {
		n := min(len(victims), l.cfg.Batch)
		r, err := l.paced(ctx, i, func() (int, error) { return l.cfg.Store.Compact(ctx, sb.ID, victims[:n]) })
		removed += r
		t.count -= r
		if err != nil {
			return removed, err
		}
		victims = victims[n:]
	}
	t.compacted = max(t.compacted, mark)
	return removed, nil
}

// prune removes the head of the log: every event older than cutoff, and the
// oldest events beyond MaxEvents. Ids are not dense (compaction removes from
// the middle), so the count cutoff is found by counting records, not ids.
func (l *Loop) prune(ctx context.Context, sb sandbox.Sandbox, t *track, cutoff time.Time) (int, error) {
	excess := t.count - l.cfg.MaxEvents
	var (
		bounds []uint64 // the last id of every Batch records to remove
		after  = uint64(sb.PrunedThrough)
		seen   int
		limit  = l.cfg.Batch
	)
	if excess <= 0 {
		limit = 1 // usually the oldest event is young and one record says so
	}
scan:
	for after < t.counted {
		recs, err := l.cfg.Store.Read(ctx, sb.ID, after, limit)
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			if rec.ID > t.counted {
				break scan // not counted yet: left for the next pass
			}
			seen++
			if seen > excess {
				ts, err := recordTS(rec)
				if err != nil {
					return 0, fmt.Errorf("event %d: %w", rec.ID, err)
				}
				if !ts.Before(cutoff) {
					break scan
				}
			}
			if (seen-1)%l.cfg.Batch == 0 {
				bounds = append(bounds, rec.ID)
			} else {
				bounds[len(bounds)-1] = rec.ID
			}
		}
		if len(recs) < limit {
			break
		}
		after = recs[len(recs)-1].ID
		limit = l.cfg.Batch
	}
	removed := 0
	for i, through := range bounds {
		r, err := l.paced(ctx, i, func() (int, error) { return l.cfg.Store.Prune(ctx, sb.ID, through, l.cfg.Batch) })
		removed += r
		t.count -= r
		if err != nil {
			return removed, err
		}
		t.pruned = through
	}
	if removed > 0 {
		l.log.Debug("pruned", "sandbox_id", sb.ID, "through", t.pruned, "removed", removed)
	}
	return removed, nil
}

// paced runs the i-th write batch of a series. Before every batch but the
// first it rests as long as the previous batch took, so appends get commits
// of their own between batches instead of queueing behind the next one: a
// long prune runs at about half speed, appends at about theirs.
func (l *Loop) paced(ctx context.Context, i int, write func() (int, error)) (int, error) {
	if i > 0 {
		timer := time.NewTimer(l.lastBatch)
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
