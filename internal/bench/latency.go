package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// runLatency measures append-to-delivery latency, idle (one event at a
// time, each delivered before the next is appended) and under a steady load
// spread over many sandboxes with a subscriber each.
func runLatency(ctx context.Context, r *runner) error {
	l, closeServer, err := r.local()
	if err != nil {
		return err
	}
	defer closeServer()

	n, spacing := pick(r, 2000, 50), pick(r, 5*time.Millisecond, time.Millisecond)
	h, err := idleLatency(ctx, l, n, spacing)
	if err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	latencyFigures(r, "idle", &h, 5*time.Millisecond,
		fmt.Sprintf("1 sandbox, 1 subscriber, one event at a time, %s apart", spacing))

	// The same load over 100 sandboxes (100 events/s each) and over 1,000
	// (10 events/s each): with more sandboxes a commit touches more of
	// them and wakes more streams, each writing fewer events at a time.
	// Then the product's load: 1,000 agents streaming their coalesced
	// output at 20 events/s each.
	d := pick(r, 10*time.Second, 500*time.Millisecond)
	loads := []struct {
		sandboxes int
		rate      float64
		what      string
	}{
		{pick(r, 100, 10), pick(r, 10000.0, 1000.0), ""},
		{pick(r, 1000, 20), pick(r, 10000.0, 1000.0), " over %d sandboxes"},
		{pick(r, 1000, 20), pick(r, 20000.0, 1000.0), " over %d sandboxes (20 events/s each)"},
	}
	for _, ld := range loads {
		res, err := loadLatency(ctx, l, ld.sandboxes, ld.rate, d)
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		what := fmt.Sprintf("at %.0f/s", ld.rate)
		if ld.what != "" {
			what += fmt.Sprintf(ld.what, ld.sandboxes)
		}
		r.add(Figure{Name: fmt.Sprintf("load: achieved rate, %s at %.0f/s", plural(ld.sandboxes, "sandbox"), ld.rate), Value: res.rate, Unit: "events/s",
			Conditions: fmt.Sprintf("offered %.0f events/s for %s: %d sandboxes, each paced by a ticker, their ticks spread over the period", ld.rate, d, ld.sandboxes)})
		latencyFigures(r, what, &res.hist, 50*time.Millisecond,
			fmt.Sprintf("%d sandboxes, a subscriber each, %.0f events/s offered", ld.sandboxes, ld.rate))
	}
	// The product's load once more with the server in a child process, so
	// that the client's 1,000 readers do not share its Go scheduler (they
	// still share the machine's CPUs).
	return latencyChild(ctx, r, realServer, pick(r, 1000, 20), pick(r, 20000.0, 1000.0), d)
}

// latencyChild runs the load of sandboxes with a subscriber each, rate
// events/s in all, against srv in a child process.
func latencyChild(ctx context.Context, r *runner, srv childServer, sandboxes int, rate float64, d time.Duration) error {
	c, closeServer, err := r.child(ctx, srv.env...)
	if err != nil {
		return err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: sandboxes})
	if err != nil {
		return err
	}
	subs, err := subscribeAll(ctx, c.addr, c.token, created.IDs)
	if err != nil {
		return err
	}
	start := time.Now()
	u0, err := c.usage()
	if err != nil {
		closeAll(subs)
		return err
	}
	end, err := c.load(ctx, subs, created.IDs, rate, d, func(lasts []uint64) []uint64 { return lasts })
	if err != nil {
		closeAll(subs)
		return err
	}
	elapsed := time.Since(start)
	u1, err := c.usage()
	if err != nil {
		closeAll(subs)
		return err
	}
	cpu, busy, haveBusy := u1.since(u0)
	if err := r.serverProfile(ctx, c); err != nil {
		closeAll(subs)
		return err
	}
	h, deliveries, err := closeAll(subs)
	if err != nil {
		return err
	}
	if deliveries != end.Appended {
		return fmt.Errorf("child server: %d deliveries, want %d", deliveries, end.Appended)
	}
	at := fmt.Sprintf("at %.0f/s over %d sandboxes, server in a child process", rate, sandboxes)
	what := srv.prefix + at
	cond := fmt.Sprintf("%d sandboxes, a subscriber each, %.0f events/s offered (%.0f/s each, their ticks spread over the period) for %s, appended inside %s; %d appended (%.0f/s)",
		sandboxes, rate, rate/float64(sandboxes), d, srv.what, end.Appended, perSecond(end.Appended, elapsed))
	latencyFigures(r, what, &h, srv.targetOf(50*time.Millisecond), cond)
	if end.Appended > 0 {
		r.add(Figure{Name: srv.prefix + "server CPU per event " + at, Value: float64(cpu) / float64(time.Microsecond) / float64(end.Appended), Unit: "µs",
			Conditions: fmt.Sprintf("the child server's user and system time over the run (%.1f s of CPU in %.1f s), its appends and their deliveries, over the events appended", cpu.Seconds(), elapsed.Seconds())})
	}
	if haveBusy {
		r.add(Figure{Name: srv.prefix + "machine CPU busy " + at, Value: busy, Unit: "%", Conditions: cond + busyConditions})
	}
	return nil
}

func idleLatency(ctx context.Context, l *local, n int, spacing time.Duration) (histogram, error) {
	ids, err := createSandboxes(ctx, l.coord, 1)
	if err != nil {
		return histogram{}, err
	}
	sub, err := subscribe(ctx, l.addr, l.token, ids[0], -1)
	if err != nil {
		return histogram{}, err
	}
	tick := time.NewTicker(spacing)
	defer tick.Stop()
	for range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			sub.close()
			return histogram{}, ctx.Err()
		}
		ev := newEvent(eventSize)
		if err := l.coord.AppendEvents(ctx, ids[0], ev); err != nil {
			sub.close()
			return histogram{}, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := sub.waitFor(wctx, ev.ID)
		cancel()
		if err != nil {
			sub.close()
			return histogram{}, err
		}
	}
	h, _, err := closeAll([]*subscriber{sub})
	return h, err
}

type loadResult struct {
	rate float64
	hist histogram
}

// loadLatency appends rate events/s spread evenly over sandboxes for d,
// one goroutine and ticker per sandbox, each append waiting for
// durability; a subscriber per sandbox records the latencies.
func loadLatency(ctx context.Context, l *local, sandboxes int, rate float64, d time.Duration) (loadResult, error) {
	ids, err := createSandboxes(ctx, l.coord, sandboxes)
	if err != nil {
		return loadResult{}, err
	}
	subs, err := subscribeAll(ctx, l.addr, l.token, ids)
	if err != nil {
		return loadResult{}, err
	}
	lasts, appended, elapsed, err := paced(ctx, l, ids, rate, d)
	if err != nil {
		closeAll(subs)
		return loadResult{}, err
	}
	if err := waitAll(ctx, subs, lasts); err != nil {
		closeAll(subs)
		return loadResult{}, err
	}
	h, _, err := closeAll(subs)
	return loadResult{rate: perSecond(appended, elapsed), hist: h}, err
}

// paced appends to each of ids on its own ticker, at rate events/s over
// all of them, for d. It returns the last id appended to each sandbox.
func paced(ctx context.Context, l *local, ids []string, rate float64, d time.Duration) (lasts []uint64, appended int64, elapsed time.Duration, err error) {
	every := time.Duration(float64(time.Second) * float64(len(ids)) / rate)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lasts = make([]uint64, len(ids))
	var count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i, id := range ids {
		wg.Go(func() {
			// Sandboxes are independent: their ticks are spread over the
			// period, not all at once.
			phase := time.NewTimer(every * time.Duration(i) / time.Duration(len(ids)))
			select {
			case <-ctx.Done():
				phase.Stop()
				return
			case <-phase.C:
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					if now.After(deadline) {
						return
					}
				}
				ev := newEvent(eventSize)
				if err := l.coord.AppendEvents(ctx, id, ev); err != nil {
					cancel(err)
					return
				}
				lasts[i] = ev.ID
				count.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, 0, err
	}
	return lasts, count.Load(), elapsed, nil
}

// waitAll waits until each subscriber has read the last id of its sandbox.
func waitAll(ctx context.Context, subs []*subscriber, lasts []uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, sub := range subs {
		if err := sub.waitFor(ctx, lasts[i]); err != nil {
			return err
		}
	}
	return nil
}
