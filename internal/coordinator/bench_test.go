package coordinator_test

import (
	"path/filepath"

	"context"
	"slices"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"

	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// BenchmarkPromptToFirstMessage measures how long a prompt takes to show up
// as its first durable message.updated, with the demo agent running as a
// process: StartTurn, the ACP round trip, translation, group commit and fsync.
func BenchmarkPromptToFirstMessage(b *testing.B) {
	e := newBenchEnv(b)
	sb, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{})
	if err != nil {
		b.Fatal(err)
	}
	var last uint64
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.co.StartTurn(context.Background(), sb.ID, "hello"); err != nil {
			b.Fatal(err)
		}
		first := false
		last = benchWait(b, e.store, sb.ID, last, func(ev sandbox.Event) bool {
			if !first && ev.Type == sandbox.TypeMessageUpdated {
				first = true
				lat = append(lat, time.Since(start))
			}
			return ev.Type == sandbox.TypeTurnCompleted
		})
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

type benchEnv struct {
	co    *coordinator.Coordinator
	store sandbox.Store
}

func newBenchEnv(b *testing.B) *benchEnv {
	dir := b.TempDir()
	st := mustOpen(b, dir)
	co, err := coordinator.New(coordinator.Config{Store: st, DataDir: dir, Agents: registry.Registry{"demo": demoAgent()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { co.Close(); st.Close() })
	return &benchEnv{co: co, store: st}
}

func benchWait(b *testing.B, st sandbox.Store, id string, after uint64, done func(sandbox.Event) bool) uint64 {
	deadline := time.After(time.Minute)
	for {
		ch := st.Wait(id)
		recs, err := st.Read(context.Background(), id, after, 1000)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			ev, err := r.Decode()
			if err != nil {
				b.Fatal(err)
			}
			after = r.ID
			if done(ev) {
				return after
			}
		}
		if len(recs) > 0 {
			continue
		}
		select {
		case <-ch:
		case <-deadline:
			b.Fatal("timed out waiting for the turn")
		}
	}
}

func mustOpen(tb testing.TB, dir string) *boltstore.Store {
	st := bolttest.MustOpenAt(tb, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	return st
}
