package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// What the child appends to its sandboxes: logs filled before a
// measurement, and the load appended at a steady rate during one, with the
// parent's call that runs a load.

// fill appends n events of size bytes to each sandbox, in batches.
func fill(ctx context.Context, co *coordinator.Coordinator, ids []string, n, size int) error {
	return parallel(ctx, len(ids), 8, func(ctx context.Context, i int) error {
		for done := 0; done < n; {
			evs := make([]*sandbox.Event, min(500, n-done))
			for j := range evs {
				evs[j] = newEvent(size)
			}
			if err := co.AppendEvents(ctx, ids[i], evs...); err != nil {
				return err
			}
			done += len(evs)
		}
		return nil
	})
}

// appendTools appends a turn with n tool calls to sandbox id, each with a
// title of size bytes: the turn is left running, so every snapshot holds
// them all.
func appendTools(ctx context.Context, co *coordinator.Coordinator, id string, n, size int) error {
	const turn = "turn_bench"
	err := co.AppendEvents(ctx, id, &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("bench")}})
	if err != nil {
		return err
	}
	title := strings.Repeat("t", size)
	for done := 0; done < n; {
		evs := make([]*sandbox.Event, min(1000, n-done))
		for i := range evs {
			evs[i] = &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: &sandbox.ToolUpdated{
				ToolCallID: fmt.Sprintf("tool_%06d", done+i), Title: title, Kind: "read", Status: "completed",
				Locations: []sandbox.Location{{Path: fmt.Sprintf("src/file_%06d.go", done+i)}},
			}}
		}
		if err := co.AppendEvents(ctx, id, evs...); err != nil {
			return err
		}
		done += len(evs)
	}
	return nil
}

// loader appends events to sandboxes at a steady rate: one goroutine per
// sandbox, each on a ticker, each waiting for its append to be durable as
// the agent runtime does.
type loader struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	appended atomic.Int64
	lasts    []uint64 // by sandbox; each written by its goroutine only
	mu       sync.Mutex
	err      error

	returned [][]appendTime // by sandbox, when times were asked for; as lasts
}

func startLoader(co *coordinator.Coordinator, ids []string, rate float64, size int, times bool) *loader {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &loader{cancel: cancel, lasts: make([]uint64, len(ids))}
	if times {
		ld.returned = make([][]appendTime, len(ids))
	}
	if len(ids) == 0 || rate <= 0 {
		return ld
	}
	every := time.Duration(float64(time.Second) * float64(len(ids)) / rate)
	tickSpread(ctx, &ld.wg, len(ids), every, func(i int) bool {
		ev := newEvent(size)
		called := time.Now().UnixNano()
		if err := co.AppendEvents(ctx, ids[i], ev); err != nil {
			if ctx.Err() == nil {
				ld.mu.Lock()
				ld.err = errors.Join(ld.err, err)
				ld.mu.Unlock()
			}
			return false
		}
		if ld.returned != nil {
			ld.returned[i] = append(ld.returned[i], appendTime{ID: ev.ID, Called: called, At: time.Now().UnixNano()})
		}
		ld.lasts[i] = ev.ID
		ld.appended.Add(1)
		return true
	})
	return ld
}

// tickSpread calls tick(i) for each of n sandboxes on a goroutine of its
// own, once per period every, their ticks spread over the period, as
// independent agents' are, not fired together, until ctx ends or tick
// returns false.
func tickSpread(ctx context.Context, wg *sync.WaitGroup, n int, every time.Duration, tick func(i int) bool) {
	for i := range n {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every * time.Duration(i) / time.Duration(n)):
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if !tick(i) {
					return
				}
			}
		})
	}
}

// appendTime is when the append of event ID was called and when it
// returned, committed and durable: the commit lies between. Both are the
// wall clock's, in ns, so that they compare with another process's
// reading of the same clock.
type appendTime struct {
	ID     uint64 `json:"id"`
	Called int64  `json:"called"`
	At     int64  `json:"at"`
}

func (ld *loader) stop() (int64, []uint64, error) {
	ld.cancel()
	ld.wg.Wait()
	return ld.appended.Load(), ld.lasts, ld.err
}

// load has the child append to ids at rate events/s in all for d, then
// waits until every subscriber has read the last event of its sandbox:
// lastsFor maps the last id of each of ids onto subs. It returns the
// child's answer to the stop.
func (c *child) load(ctx context.Context, subs []*subscriber, ids []string, rate float64, d time.Duration, lastsFor func([]uint64) []uint64) (childReply, error) {
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: ids, Rate: rate, Size: eventSize}); err != nil {
		return childReply{}, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return childReply{}, err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	if err != nil {
		return childReply{}, err
	}
	return end, waitAll(ctx, subs, lastsFor(end.Lasts))
}
