package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// A sandbox's worker: it reads the log after the endpoint's cursor, posts
// each event until the receiver takes it (the request is deliver.go's),
// disables the endpoint that fails too long, and saves the cursor.

// work delivers the events of sandbox id after cursor, in order, until
// the runner stops or the sandbox is dropped. Without a stored cursor
// (known false) it starts from the oldest retained event, and events
// stamped before the endpoint was created are passed over.
func (r *runner) work(id string, cursor uint64, known bool) {
	ctx, l := r.ctx, r.l
	log := l.log.With("endpoint", r.ep.ID, "sandbox", id)
	if l.cfg.Holds != nil {
		// On a shared store another node may have delivered this sandbox
		// since the runner loaded its cursors: it resumes from the
		// cursor that node saved.
		stored, err := l.cfg.Store.WebhookCursors(ctx, r.ep.ID)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("webhooks: read the endpoint's cursors", "err", err)
			}
			return // the next scan starts the worker again
		}
		if c, ok := stored[id]; ok && (!known || c > cursor) {
			cursor, known = c, true
			r.advance(id, c)
		}
	}
	since := r.ep.CreatedAt.Truncate(time.Millisecond) // events' ts have ms precision
	// The cursor is saved after each page, saveEvery after the last save,
	// before a failed attempt's wait and when the worker stops, not after
	// every delivery: a crash delivers again what was taken since the
	// last save (with the same webhook-ids), and a delivery costs no
	// commit of its own.
	saved, lastSave := cursor, l.cfg.Now()
	flush := func() {
		if cursor > saved {
			r.saveCursor(id, cursor)
			saved, lastSave = cursor, l.cfg.Now()
		}
	}
	defer flush()
	failures := 0
	for ctx.Err() == nil && r.holds(id) {
		wake := l.cfg.Log.Wait(id) // before Read, so no commit between is missed
		recs, err := l.cfg.Log.Read(ctx, id, cursor, readPage)
		if err != nil {
			var se *sandbox.Error
			switch {
			case ctx.Err() != nil:
				return
			case errors.As(err, &se) && se.Type == sandbox.ENotFound:
				return // dropped; its cursor goes with the endpoint
			case errors.As(err, &se) && se.Type == sandbox.ECursorPruned && se.Marks != nil:
				log.Warn("webhooks: events pruned before they were delivered", "after", cursor, "pruned_through", se.Marks.PrunedThrough)
				cursor = uint64(se.Marks.PrunedThrough)
				flush()
				continue
			}
			failures++
			log.Error("webhooks: read the log", "err", err)
			if !sleepOrWake(ctx, backoff(l.cfg.MinBackoff, l.cfg.MaxBackoff, failures), nil) {
				return
			}
			continue
		}
		failures = 0
		if len(recs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			continue
		}
		for _, rec := range recs {
			deliver := r.ep.wants(id, rec.Type)
			if deliver && !known {
				ts, err := eventTime(rec)
				deliver = err != nil || !ts.Before(since)
			}
			if !deliver {
				cursor = rec.ID
				continue
			}
			if !r.deliver(id, rec, flush) {
				return
			}
			cursor, known = rec.ID, true
			r.advance(id, cursor)
			if l.cfg.Now().Sub(lastSave) >= saveEvery {
				flush()
			}
		}
		flush()
	}
}

// saveEvery bounds how long a worker delivering without pause keeps its
// progress in memory only.
const saveEvery = 200 * time.Millisecond

// deliver posts rec until the receiver takes it; the caller moves the
// cursor past it. It calls flush before the first wait for a retry. It
// returns false when the runner stopped first, or disabled the endpoint.
func (r *runner) deliver(id string, rec sandbox.Record, flush func()) bool {
	ctx, l := r.ctx, r.l
	body, err := Body(rec)
	if err != nil {
		// A record the store served is valid JSON; should one not be,
		// holding every later event behind it helps no one.
		l.log.Error("webhooks: skip an event", "endpoint", r.ep.ID, "sandbox", id, "event", rec.ID, "err", err)
		return true
	}
	wakeUp := l.begin(r.ep.ID, id, rec)
	defer l.end(r.ep.ID, id)
	var first time.Time
	for n := 1; ; n++ {
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		now := l.cfg.Now()
		a := post(ctx, l.cfg.Client, &r.ep, l.signer(r.ep.ID, r.signer), now, id, rec, body)
		a.N = n
		<-r.sem
		if !a.OK() && ctx.Err() != nil {
			return false
		}
		if first.IsZero() {
			first = now
		}
		disable := !a.OK() && now.Sub(first) >= l.cfg.DisableAfter
		delay := backoff(l.cfg.MinBackoff, l.cfg.MaxBackoff, n)
		if !a.OK() && !disable {
			a.Next = now.Add(delay)
		}
		if disable {
			r.disable(fmt.Sprintf("event %d of sandbox %s failed for %s: %s", rec.ID, id, now.Sub(first).Round(time.Second), a.Err))
		}
		l.record(a)
		switch {
		case a.OK():
			return true
		case disable:
			return false
		}
		l.log.Warn("webhooks: delivery failed", "endpoint", r.ep.ID, "sandbox", id, "event", rec.ID,
			"attempt", n, "status", a.Status, "err", a.Err, "retry_in", delay.Round(time.Millisecond))
		if n == 1 {
			flush()
		}
		if !sleepOrWake(ctx, delay, wakeUp) {
			return false
		}
	}
}

// disable turns the endpoint off with reason and stops its runner; the
// record is read again so a change made meanwhile is kept.
func (r *runner) disable(reason string) {
	l := r.l
	l.log.Error("webhooks: endpoint disabled", "endpoint", r.ep.ID, "reason", reason)
	r.cancel()
	ctx := l.ctx
	ep, err := Get(ctx, l.cfg.Store, r.ep.ID)
	if err == nil && ep.Enabled {
		ep.Enabled, ep.DisabledReason = false, reason
		err = Put(ctx, l.cfg.Store, ep)
	}
	if err != nil && ctx.Err() == nil {
		l.log.Error("webhooks: disable endpoint", "endpoint", r.ep.ID, "err", err)
	}
	l.Kick()
}

// advance records in memory that the endpoint is done with sandbox id's
// log through cursor.
func (r *runner) advance(id string, cursor uint64) {
	r.mu.Lock()
	r.cursors[id] = max(r.cursors[id], cursor)
	r.mu.Unlock()
}

func (r *runner) saveCursor(id string, cursor uint64) {
	r.advance(id, cursor)
	// Not the runner's context: a cursor earned by a 2xx is kept even
	// when the loop is closing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.l.ctx), cursorTimeout)
	defer cancel()
	err := r.l.cfg.Store.SetWebhookCursor(ctx, r.ep.ID, id, cursor)
	var se *sandbox.Error
	if err != nil && !(errors.As(err, &se) && se.Type == sandbox.ENotFound) {
		// The next start delivers again from the cursor kept: at least once.
		r.l.log.Error("webhooks: save cursor", "endpoint", r.ep.ID, "sandbox", id, "err", err)
	}
}
