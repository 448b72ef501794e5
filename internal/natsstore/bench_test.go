package natsstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// benchEvent is a typical durable event: a message snapshot of a few
// hundred bytes, like boltstore's benchmark appends.
func benchEvent() *sandbox.Event {
	return &sandbox.Event{
		Type: sandbox.TypeMessageUpdated, TS: t0, TurnID: "turn_01jx4d9a1b2c3d4e5f6g7h8j9k",
		Data: &sandbox.MessageUpdated{
			MessageID: "msg_01jx4d9a1b2c3d4e5f6g7h8j9k", PartID: "part_01jx4d9a1b2c3d4e5f6g7h8j9k",
			Kind: sandbox.PartText, Text: strings.Repeat("All work and no play. ", 12),
		},
	}
}

// BenchmarkAppend measures durable appends against an in-process server.
// Each writers=N case runs N goroutines, each appending one event at a time
// to its own sandbox, so every append waits for its publish acknowledgement
// and its state update. sync=always is the recommended setting (acked means
// synced), where the disk's fsync latency bounds the rate: JetStream syncs
// each message on its own; sync=interval is the server's default, for
// comparison.
func BenchmarkAppend(b *testing.B) {
	for _, interval := range []time.Duration{0, 2 * time.Minute} {
		name := "sync=always"
		if interval > 0 {
			name = "sync=interval"
		}
		for _, writers := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("%s/writers=%d", name, writers), func(b *testing.B) {
				benchAppend(b, natstest.Config{SyncInterval: interval}, writers, 1, false)
			})
		}
	}
}

// BenchmarkAppendBatch measures appends of 8 events at a time (a run of a
// streaming turn's updates) by 16 writers, each holding its sandbox's
// lease as a coordinator node does (fenced) or not, on a server that syncs
// every write.
func BenchmarkAppendBatch(b *testing.B) {
	for _, fenced := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=8/writers=16/fenced=%v", fenced), func(b *testing.B) {
			benchAppend(b, natstest.Config{}, 16, 8, fenced)
		})
	}
}

func benchAppend(b *testing.B, cfg natstest.Config, writers, events int, fenced bool) {
	ctx := context.Background()
	url, _ := natstest.RunServerConfig(b, cfg)
	s := mustOpenChecked(b, url)
	var cl *natscluster.Cluster
	if fenced {
		var err error
		if cl, err = natscluster.Join(ctx, s, natscluster.Options{Node: "bench", LeaseTTL: time.Minute,
			Logger: slog.New(slog.DiscardHandler)}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
	}
	ids := make([]string, writers)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%04d", i)
		if cl != nil {
			mustClaim(b, cl, ids[i])
		}
		mustCreate(b, s, ids[i])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	b.ResetTimer()
	for _, id := range ids {
		wg.Go(func() {
			for next.Add(int64(events)) <= int64(b.N) {
				evs := make([]*sandbox.Event, events)
				for i := range evs {
					evs[i] = benchEvent()
				}
				if err := s.Append(ctx, id, evs, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkVisible measures how long an event takes from the start of its
// Append to a tailing reader's Read returning it (Wait, then Read, as the
// SSE stream does), with one sandbox or 16 written at once, on a server
// that syncs every write.
func BenchmarkVisible(b *testing.B) {
	for _, sandboxes := range []int{1, 16} {
		b.Run(fmt.Sprintf("sandboxes=%d", sandboxes), func(b *testing.B) { benchVisible(b, sandboxes) })
	}
}

func benchVisible(b *testing.B, sandboxes int) {
	ctx := context.Background()
	url, _ := natstest.RunServer(b)
	s := mustOpenChecked(b, url)
	ids := make([]string, sandboxes)
	started := make([]map[uint64]time.Time, sandboxes) // by each writer
	seen := make([]map[uint64]time.Time, sandboxes)    // by each reader
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%04d", i)
		mustCreate(b, s, ids[i])
		started[i], seen[i] = map[uint64]time.Time{}, map[uint64]time.Time{}
	}
	stop := make(chan struct{})
	var readers, writers sync.WaitGroup
	for i, id := range ids {
		readers.Go(func() {
			var cursor uint64
			for {
				wait := s.Wait(id)
				recs, err := s.Read(ctx, id, cursor, 100)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				for _, r := range recs {
					seen[i][r.ID] = now
					cursor = r.ID
				}
				if len(recs) > 0 {
					continue
				}
				select {
				case <-wait:
				case <-stop:
					if head, _ := s.Head(id); cursor == head.LastEventID {
						return
					}
				}
			}
		})
	}
	var next atomic.Int64
	b.ResetTimer()
	for i, id := range ids {
		writers.Go(func() {
			for next.Add(1) <= int64(b.N) {
				ev := benchEvent()
				t := time.Now()
				if err := s.Append(ctx, id, []*sandbox.Event{ev}, nil); err != nil {
					b.Error(err)
					return
				}
				started[i][ev.ID] = t
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	b.StopTimer()
	var lat []time.Duration
	for i := range ids {
		for id, t := range started[i] {
			lat = append(lat, seen[i][id].Sub(t))
		}
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
