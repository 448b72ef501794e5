package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// eventSize is the text size of a benchmark event: a message snapshot of a
// few hundred bytes, the size boltstore's own benchmark uses.
const eventSize = 256

// runAppend measures durable appends/s through coordinator.AppendEvents:
// each of N writers appends one event at a time to its own sandbox and
// waits for it to be durable, so only group commit can share an fsync. Two
// references come from the same store on the same disk in the same run:
// the baseline (one writer: one transaction per event) and the ceiling (one
// AppendEvents call of many events: one transaction for all of them).
func runAppend(ctx context.Context, r *runner) error {
	d := pick(r, 5*time.Second, 300*time.Millisecond)
	rates := map[int]float64{}
	for _, writers := range []int{1, 16, 256} {
		res, err := measureWriters(ctx, r, writers, d)
		if err != nil {
			return err
		}
		rates[writers] = res.rate
		cond := fmt.Sprintf("%s, one sandbox each, one %d-byte message.updated per AppendEvents, each waiting for durability; %s",
			plural(writers, "writer"), eventSize, d)
		r.add(Figure{Name: "appends/s, " + plural(writers, "sandbox"), Value: res.rate, Unit: "events/s", Conditions: cond})
		r.add(Figure{Name: "append wait p99, " + plural(writers, "sandbox"), Value: ms(res.p99), Unit: "ms",
			Conditions: fmt.Sprintf("from the call to AppendEvents to its return; p50 %.2f ms", ms(res.p50))})
	}

	events := pick(r, 20000, 500)
	ceiling, err := measureCeiling(ctx, r, events)
	if err != nil {
		return err
	}
	r.add(Figure{Name: "ceiling: one transaction", Value: ceiling, Unit: "events/s",
		Conditions: fmt.Sprintf("one AppendEvents call of %d events (one transaction: one commit, which bbolt syncs twice), best of 3, same store and disk", events)})
	baseline := rates[1]
	r.add(Figure{Name: "baseline: one transaction per event", Value: baseline, Unit: "events/s",
		Conditions: "the 1-sandbox figure: one writer, one commit and fsync per event"})

	top := rates[256]
	ok := top >= 0.7*ceiling && top >= 20*baseline
	r.add(Figure{Name: "256 sandboxes vs ceiling", Value: 100 * top / ceiling, Unit: "%",
		Conditions: fmt.Sprintf("%.0f of %.0f events/s; raw bbolt: go test -run '^$' -bench Append ./boltstore", top, ceiling),
		Target:     ">= 70%", Met: atLeast(top, 0.7*ceiling)})
	r.add(Figure{Name: "256 sandboxes vs baseline", Value: top / baseline, Unit: "x",
		Conditions: fmt.Sprintf("%.0f vs %.0f events/s", top, baseline),
		Target:     ">= 20x", Met: atLeast(top, 20*baseline)})
	r.logf("256 sandboxes: %.0f events/s, %.0f%% of the ceiling, %.1fx the baseline (both targets met: %v)",
		top, 100*top/ceiling, top/baseline, ok)

	n := pick(r, 1000, 20)
	disk, err := measureSync(r, n)
	if err != nil {
		return err
	}
	r.add(Figure{Name: "disk: fdatasync p50", Value: ms(disk.quantile(0.5)), Unit: "ms",
		Conditions: fmt.Sprintf("%d appends of 4 KiB to a file in the store's directory, each followed by fdatasync; p99 %.2f ms; "+
			"a commit syncs at least once, so this bounds the baseline", n, ms(disk.quantile(0.99)))})
	return nil
}

// measureSync times write+fdatasync of 4 KiB n times: what the disk gives
// one durable write, with no store in the way.
func measureSync(r *runner, n int) (*histogram, error) {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	f, err := os.Create(filepath.Join(dir, "sync"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	block := make([]byte, 4<<10)
	var h histogram
	for range n {
		t0 := time.Now()
		if _, err := f.Write(block); err != nil {
			return nil, err
		}
		if err := datasync(f); err != nil {
			return nil, err
		}
		h.record(time.Since(t0))
	}
	return &h, nil
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "x") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

type writersResult struct {
	rate     float64
	p50, p99 time.Duration
}

func measureWriters(ctx context.Context, r *runner, writers int, d time.Duration) (writersResult, error) {
	l, closeServer, err := r.local()
	if err != nil {
		return writersResult{}, err
	}
	defer closeServer()
	ids, err := createSandboxes(ctx, l.coord, writers)
	if err != nil {
		return writersResult{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		count atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		hist  histogram
		first error
	)
	stop := make(chan struct{})
	start := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			var h histogram
			defer func() {
				mu.Lock()
				hist.merge(&h)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if err := l.coord.AppendEvents(ctx, id, newEvent(eventSize)); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					cancel()
					return
				}
				h.record(time.Since(t0))
				count.Add(1)
			}
		})
	}
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return writersResult{}, first
	}
	if err := ctx.Err(); err != nil {
		return writersResult{}, err
	}
	return writersResult{rate: perSecond(count.Load(), elapsed), p50: hist.quantile(0.5), p99: hist.quantile(0.99)}, nil
}

// measureCeiling appends events in one call, three times on one fresh
// store, and returns the best rate.
func measureCeiling(ctx context.Context, r *runner, events int) (float64, error) {
	l, closeServer, err := r.local()
	if err != nil {
		return 0, err
	}
	defer closeServer()
	ids, err := createSandboxes(ctx, l.coord, 1)
	if err != nil {
		return 0, err
	}
	var best float64
	for range 3 {
		evs := make([]*sandbox.Event, events)
		for i := range evs {
			evs[i] = newEvent(eventSize)
		}
		start := time.Now()
		if err := l.coord.AppendEvents(ctx, ids[0], evs...); err != nil {
			return 0, err
		}
		best = max(best, perSecond(int64(events), time.Since(start)))
	}
	return best, nil
}
