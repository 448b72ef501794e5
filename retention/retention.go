// Package retention keeps the sandboxes' event logs bounded. A background
// loop prunes each log from its head by age, by count and by bytes (whole
// finished turns), compacts the superseded message.updated events of
// finished turns out of its middle, and drops deleted sandboxes whole once
// they have aged out. Pruning advances the log's pruned_through watermark,
// the low-watermark signal readers check their cursors against (docs/stream.md,
// docs/retention.md).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/disk"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Store is what retention needs of the event store. boltstore.Store
// implements it.
type Store interface {
	// Sandboxes lists sandboxes with their watermarks, in id order, after
	// the given id.
	Sandboxes(ctx context.Context, after string, limit int) (list []sandbox.Sandbox, more bool, err error)
	// Sandbox returns one sandbox with its watermarks.
	Sandbox(ctx context.Context, id string) (sandbox.Sandbox, error)
	// LogBytes returns the bytes of the retained log of sandbox id and
	// those of its current or last turn (sandbox.State.LogBytes), cheaply.
	LogBytes(id string) (log, turn uint64, err error)
	// Read returns up to limit retained records with id > after, in order.
	Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error)
	// Prune removes every event with id <= through, at most batch deletes
	// per transaction, advancing pruned_through and oldest_event_id with
	// each batch.
	Prune(ctx context.Context, id string, through uint64, batch int) (removed int, err error)
	// Compact removes the given events from anywhere in the log.
	Compact(ctx context.Context, id string, ids []uint64) (removed int, err error)
	// Drop removes a sandbox whole.
	Drop(ctx context.Context, id string) error
}

// FromPruner is what a Store adds whose logs other processes prune at the
// same time (the nodes of a cluster over one store, each running a loop).
// A pass finds its cut by counting the records after the pruned_through it
// listed; another process's prune since, which the listing and the reads
// of this one may not show yet, leaves that count too high and the cut too
// far, and the two prunes together would keep fewer events than
// MaxEvents. PruneFrom is Prune on the condition that the log is pruned
// through no further than from, checked in the same step that moves
// pruned_through. Refused, it removes nothing and returns an error of type
// sandbox.ECursorPruned; the loop counts that log afresh next pass. A
// store that one process alone prunes (boltstore) needs none.
type FromPruner interface {
	PruneFrom(ctx context.Context, id string, from, through uint64, batch int) (removed int, err error)
}

// Marker is what a Store adds to keep the loop's compaction mark across
// restarts: every turn that completed at or before a sandbox's mark is
// compacted, so the first pass after a start reads each log from its mark,
// not from its head. A store without it is read whole by the first pass.
// Both stores implement it.
type Marker interface {
	// CompactionMark returns the mark of sandbox id, 0 when none is set.
	CompactionMark(id string) (uint64, error)
	// SetCompactionMarks sets the marks of several sandboxes at once,
	// skipping those gone.
	SetCompactionMarks(ctx context.Context, marks map[string]uint64) error
}

// Config is what a Loop needs. Zero values take the defaults.
type Config struct {
	Store Store
	// MaxAge prunes events older than this (default 168h).
	MaxAge time.Duration
	// MaxEvents keeps at most this many events per sandbox (default 100000).
	MaxEvents int
	// MaxBytes bounds the bytes of a sandbox's retained log, its events'
	// envelopes as a reader gets them (default 256 MiB): past it the
	// oldest finished turns are pruned until it is under (see bytes.go).
	MaxBytes int64
	// Interval is the time between passes (default 1m).
	Interval time.Duration
	// Batch bounds the deletes of one write transaction (default 200): a
	// batch shares the commit of the appends queued beside it, and adds
	// that much work to it. The loop rests between batches twice as long
	// as the last one took.
	Batch int
	// DataDir holds sandboxes/<id>, removed when a deleted sandbox is
	// dropped. Empty leaves directories alone.
	DataDir string
	Now     func() time.Time
	Logger  *slog.Logger
	// Observer is told what each pass removed, for metrics; nil observes
	// nothing.
	Observer Observer
}

// Observer is told what retention removed.
type Observer interface {
	Retained(pruned, compacted int)
}

// Defaults of Config.
const (
	DefaultMaxAge    = 168 * time.Hour
	DefaultMaxEvents = 100000
	DefaultMaxBytes  = 256 << 20
	DefaultInterval  = time.Minute
	DefaultBatch     = 200
)

// Result counts what one pass did.
type Result struct {
	Sandboxes int // sandboxes looked at
	Pruned    int // events removed from the head of logs
	Compacted int // superseded message.updated events removed
	Dropped   int // deleted sandboxes removed whole
}

func (r *Result) add(o Result) {
	r.Sandboxes += o.Sandboxes
	r.Pruned += o.Pruned
	r.Compacted += o.Compacted
	r.Dropped += o.Dropped
}

// Loop runs retention passes. RunOnce may be called directly; Start runs it
// every Interval until Close.
type Loop struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// pass serializes passes; tracks belongs to whoever holds it.
	pass      sync.Mutex
	tracks    map[string]*track
	lastBatch time.Duration   // how long the last prune batch took to commit
	kept      map[string]bool // deleted sandboxes whose files resist removal, logged once
	passed    bool            // the loop's first pass is logged

	// nudge wakes the loop for the sandboxes in nudged (under mu), whose
	// logs grew past MaxBytes between passes (Nudge).
	nudge  chan struct{}
	nudged map[string]bool

	mu      sync.Mutex
	started bool
	beat    time.Time // the loop last showed progress
	lastRun time.Time // the last pass ended
	lastErr error
}

// New returns a Loop over cfg.Store; it does nothing until Start or RunOnce.
func New(cfg Config) *Loop {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Loop{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, tracks: map[string]*track{},
		nudge: make(chan struct{}, 1), nudged: map[string]bool{}}
}

// Start runs a pass at once and then every Interval, in the background.
func (l *Loop) Start() {
	l.mu.Lock()
	l.started = true
	l.beat = l.cfg.Now()
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.loop(l.ctx)
	}()
}

// Close stops the loop, interrupting a pass in progress, and waits for it.
func (l *Loop) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *Loop) loop(ctx context.Context) {
	ticker := time.NewTicker(l.cfg.Interval)
	defer ticker.Stop()
	for {
		l.runLogged(ctx)
		for again := true; again; {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				again = false
			case <-l.nudge:
				l.runNudged(ctx)
			}
		}
	}
}

func (l *Loop) runLogged(ctx context.Context) {
	start := time.Now()
	res, err := l.RunOnce(ctx, l.cfg.Now())
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		l.log.Error("retention pass failed", "err", err)
	}
	if !l.passed {
		// What a start costs is not over before this pass is: say when.
		l.passed = true
		l.log.Info("first retention pass", "sandboxes", res.Sandboxes, "took", time.Since(start).Round(time.Millisecond))
	}
	if res.Pruned+res.Compacted+res.Dropped > 0 {
		l.log.Info("retention pass", "sandboxes", res.Sandboxes, "pruned", res.Pruned,
			"compacted", res.Compacted, "dropped", res.Dropped)
	}
}

// Alive reports whether a started loop is making progress: it has begun or
// finished a pass, a sandbox or a write batch in the last three intervals. A
// pass stuck on the store shows up here; a long one does not.
func (l *Loop) Alive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started && l.ctx.Err() == nil && l.cfg.Now().Sub(l.beat) < 3*l.cfg.Interval
}

// LastRun returns when the last pass ended (zero before the first) and its
// error.
func (l *Loop) LastRun() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastRun, l.lastErr
}

func (l *Loop) heartbeat() {
	l.mu.Lock()
	l.beat = l.cfg.Now()
	l.mu.Unlock()
}

// RunOnce runs one pass over every sandbox with now as the present: events
// with ts before now-MaxAge are pruned. An error on one sandbox is reported
// and the pass goes on with the next; the result counts what was done.
func (l *Loop) RunOnce(ctx context.Context, now time.Time) (total Result, _ error) {
	l.pass.Lock()
	defer l.pass.Unlock()
	if l.cfg.Observer != nil {
		defer func() { l.cfg.Observer.Retained(total.Pruned, total.Compacted) }()
	}
	l.heartbeat()
	var (
		errs  []error
		seen  = map[string]bool{}
		after string
	)
	for {
		list, more, err := l.cfg.Store.Sandboxes(ctx, after, 100)
		if err != nil {
			errs = append(errs, fmt.Errorf("list sandboxes: %w", err))
			break
		}
		marks := map[string]uint64{}
		for _, sb := range list {
			seen[sb.ID] = true
			res, err := l.sandbox(ctx, sb, now)
			if t := l.tracks[sb.ID]; t != nil && t.compacted > t.marked {
				marks[sb.ID] = t.compacted
			}
			total.add(res)
			total.Sandboxes++
			// A sandbox dropped meanwhile is no failure; neither is a prune
			// this loop did not make, which the next pass counts afresh.
			if err != nil && !sandbox.IsType(err, sandbox.ENotFound) && !sandbox.IsType(err, sandbox.ECursorPruned) {
				errs = append(errs, fmt.Errorf("sandbox %s: %w", sb.ID, err))
			}
			if ctx.Err() != nil {
				return total, ctx.Err()
			}
			l.heartbeat()
		}
		if err := l.saveMarks(ctx, marks); err != nil {
			errs = append(errs, fmt.Errorf("save compaction marks: %w", err))
		}
		if !more || len(list) == 0 {
			break
		}
		after = list[len(list)-1].ID
	}
	if len(errs) == 0 {
		// Forget sandboxes that are gone, but only after a complete listing.
		for id := range l.tracks {
			if !seen[id] {
				delete(l.tracks, id)
			}
		}
	}
	err := errors.Join(errs...)
	l.mu.Lock()
	l.lastRun, l.lastErr, l.beat = l.cfg.Now(), err, l.cfg.Now()
	l.mu.Unlock()
	return total, err
}

// sandbox runs one sandbox's share of a pass: drop it if it is deleted and
// old, else compact its finished turns and prune its head.
func (l *Loop) sandbox(ctx context.Context, sb sandbox.Sandbox, now time.Time) (Result, error) {
	var res Result
	cutoff := now.Add(-l.cfg.MaxAge)
	if sb.Status == sandbox.StatusDeleted {
		expired, err := l.expired(ctx, sb, cutoff)
		if err != nil {
			return res, err
		}
		if expired {
			if err := l.drop(ctx, sb.ID); errors.Is(err, errFilesKept) {
				return res, nil // logged once; tried again next pass
			} else if err != nil {
				return res, err
			}
			res.Dropped++
			return res, nil
		}
	}
	t := l.tracks[sb.ID]
	if t == nil || t.pruned != uint64(sb.PrunedThrough) {
		// First sight, or a prune this loop did not make: count afresh.
		var err error
		if t, err = l.newTrack(sb); err != nil {
			return res, err
		}
		l.tracks[sb.ID] = t
	}
	compacted, err := l.compact(ctx, sb, t)
	res.Compacted += compacted
	if err != nil || t.stale {
		// Pruning by count on a count that is off could remove events the
		// limit keeps: count afresh next pass.
		delete(l.tracks, sb.ID)
		return res, err
	}
	pruned, err := l.prune(ctx, sb, t, cutoff)
	res.Pruned += pruned
	if err != nil || t.stale {
		delete(l.tracks, sb.ID)
		return res, err
	}
	return res, nil
}

// newTrack starts what the loop remembers of a log it has not seen, or saw
// pruned by someone else: compaction resumes at the store's mark
// (Marker), and the records are counted only if the scan from there
// starts at the log's head; else prune counts them when it needs to.
func (l *Loop) newTrack(sb sandbox.Sandbox) (*track, error) {
	p := uint64(sb.PrunedThrough)
	t := &track{pruned: p, counted: p, countKnown: true}
	if m, ok := l.cfg.Store.(Marker); ok {
		mark, err := m.CompactionMark(sb.ID)
		if err != nil {
			return nil, err
		}
		t.compacted, t.marked = mark, mark
		t.countKnown = mark <= p
	}
	return t, nil
}

// saveMarks writes the compaction marks a pass moved, in one write.
func (l *Loop) saveMarks(ctx context.Context, marks map[string]uint64) error {
	m, ok := l.cfg.Store.(Marker)
	if !ok || len(marks) == 0 {
		return nil
	}
	if err := m.SetCompactionMarks(ctx, marks); err != nil {
		return err
	}
	for id, mark := range marks {
		if t := l.tracks[id]; t != nil {
			t.marked = max(t.marked, mark)
		}
	}
	return nil
}

// expired reports whether a deleted sandbox has aged out: its last retained
// event and its updated_at (the deletion, or the last activity) are both
// older than cutoff.
func (l *Loop) expired(ctx context.Context, sb sandbox.Sandbox, cutoff time.Time) (bool, error) {
	if !sb.UpdatedAt.Before(cutoff) {
		return false, nil
	}
	last := uint64(sb.LastEventID)
	if last == 0 || last <= uint64(sb.PrunedThrough) {
		return true, nil // the log is empty
	}
	recs, err := l.cfg.Store.Read(ctx, sb.ID, last-1, 1)
	if err != nil {
		return false, err
	}
	if len(recs) == 0 {
		return true, nil
	}
	ts, err := recordTS(recs[0])
	if err != nil {
		return false, err
	}
	return ts.Before(cutoff), nil
}

// errFilesKept is drop's error when a sandbox's files resist removal.
var errFilesKept = errors.New("the sandbox's files could not all be removed")

// drop removes the sandbox's directory, then its data: a failure in between
// leaves the sandbox listed, so the next pass tries again. Directories an
// agent left read-only (go mod download leaves its module cache 0555) are
// given their owner's rights back first, never through a link (see
// disk.RemoveAll). Files that still resist are logged once per sandbox,
// not at every pass, and the sandbox waits for the next.
func (l *Loop) drop(ctx context.Context, id string) error {
	if l.cfg.DataDir != "" {
		if !filepath.IsLocal(id) || filepath.Base(id) != id {
			return fmt.Errorf("refusing to remove the directory of sandbox id %q", id)
		}
		if err := disk.RemoveAll(string(datadir.Dir(l.cfg.DataDir).Sandbox(id))); err != nil {
			if !l.kept[id] {
				l.log.Error("a deleted sandbox's files could not be removed; its record stays and each pass tries again",
					"sandbox_id", id, "err", err)
				if l.kept == nil {
					l.kept = map[string]bool{}
				}
				l.kept[id] = true
			}
			return errFilesKept
		}
		delete(l.kept, id)
	}
	if err := l.cfg.Store.Drop(ctx, id); err != nil {
		return err
	}
	delete(l.tracks, id)
	l.log.Info("dropped deleted sandbox", "sandbox_id", id)
	return nil
}
