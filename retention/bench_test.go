package retention_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// BenchmarkAppendDuringPrune measures the latency of single-event appends to
// a sandbox whose log holds 1,000,000 events: with nothing else going on
// (idle), while a retention pass prunes that log down to its newest 1000
// events (pruning), and once it is done (after, where the file has as many
// free pages as the prune made). The pass's bounded, paced batches should
// keep the pruning p99 within about twice the idle one. Only appends made
// while the pass runs are counted, so run it with a -benchtime long enough
// for the whole pass (the samples metric says how many there were).
func BenchmarkAppendDuringPrune(b *testing.B) {
	const fill, fillBatch = 1_000_000, 20_000
	s := bolttest.MustOpen(b)
	defer s.Close()
	mustCreate(b, s, "c_1")
	for i := 0; i < fill; i += fillBatch {
		evs := make([]*sandbox.Event, fillBatch)
		for j := range evs {
			evs[j] = toolEvent(t0, j%8) // few tools: the state stays small
		}
		mustAppend(b, s, "c_1", evs...)
	}

	appendOne := func(b *testing.B) time.Duration {
		start := time.Now()
		if err := s.Append(context.Background(), "c_1", []*sandbox.Event{toolEvent(t0, 0)}, nil); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}

	b.Run("idle", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			lat = append(lat, appendOne(b))
		}
		report(b, lat)
	})

	b.Run("pruning", func(b *testing.B) {
		l := retention.New(retention.Config{Store: s, MaxEvents: 1000})
		ctx, cancel := context.WithCancel(context.Background())
		var (
			running atomic.Bool
			wg      sync.WaitGroup
			res     retention.Result
			passErr error
		)
		running.Store(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer running.Store(false)
			res, passErr = l.RunOnce(ctx, t0)
		}()
		var lat []time.Duration
		for b.Loop() {
			if !running.Load() {
				continue // the pass is over: later appends would measure "after"
			}
			d := appendOne(b)
			if running.Load() {
				lat = append(lat, d)
			}
		}
		cancel()
		wg.Wait()
		if passErr != nil && ctx.Err() == nil {
			b.Fatal(passErr)
		}
		b.ReportMetric(float64(res.Pruned), "pruned")
		report(b, lat)
	})
	b.Run("after", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			lat = append(lat, appendOne(b))
		}
		report(b, lat)
	})
}

// report adds the p50 and p99 of the measured latencies in microseconds.
func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		b.Fatal("no append was measured")
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(lat)), "samples")
}
