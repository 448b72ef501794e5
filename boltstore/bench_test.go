package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// benchText is the text of every benchEvent, built once: the writers
// should not spend the CPU they share with the store on making it.
var benchText = strings.Repeat("All work and no play. ", 12)

// benchEvent is a typical durable event: a message snapshot of a few hundred
// bytes.
func benchEvent() *sandbox.Event {
	return &sandbox.Event{
		Type: sandbox.TypeMessageUpdated, TS: testNow, TurnID: "turn_01jx4d9a1b2c3d4e5f6g7h8j9k",
		Data: &sandbox.MessageUpdated{
			MessageID: "msg_01jx4d9a1b2c3d4e5f6g7h8j9k", PartID: "part_01jx4d9a1b2c3d4e5f6g7h8j9k",
			Kind: sandbox.PartText, Text: benchText,
		},
	}
}

// BenchmarkAppend measures durable appends on this machine's disk. Each
// writers=N case runs N goroutines, each appending one event at a time to
// its own sandbox, so every event waits for its fsync and only group commit
// shares them; the time includes materializing what the WAL holds at the
// end. The baseline pays one transaction (and fsync) per event; the ceiling
// writes all events in a single transaction, once with the file mapped as
// bbolt maps it and once mapped from the start (see benchCeiling).
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchWriters(b, writers) })
	}
	b.Run("paced=1000x20", func(b *testing.B) { benchPaced(b, 1000, 20, 5*time.Second) })
	b.Run("baseline-tx-per-event", benchBaseline)
	b.Run("ceiling-one-tx", func(b *testing.B) { benchCeiling(b, 0) })
	b.Run("ceiling-one-tx-presized", func(b *testing.B) { benchCeiling(b, 1<<30) })
}

func benchWriters(b *testing.B, writers int) {
	obs := &countingObserver{}
	s := MustOpenStoreAt(b, filepath.Join(b.TempDir(), "sparkles.db"), Options{Observer: obs})
	ids := make([]string, writers)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%04d", i)
		mustCreate(b, s, ids[i])
	}
	appendFromAll(b, s, obs, ids)
}

// appendFromAll appends b.N one-event appends from a writer per sandbox
// of ids, each waiting for its append, and reports what the commits cost.
func appendFromAll(b *testing.B, s *Store, obs *countingObserver, ids []string) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	m := startAppend(s.db)
	m.obs = obs
	obs.reset()
	b.ResetTimer()
	for _, id := range ids {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := s.Append(ctx, id, []*sandbox.Event{benchEvent()}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	// What the WAL still holds is materialized on the clock: the cost of
	// an event includes moving it into its sandbox's buckets.
	if err := s.flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	m.report(b)
}

// benchPaced is the product's load at the store: sandboxes each append
// one event every 1/rate s on a ticker of its own (the ticks spread over
// the period) for d, each append waiting for durability. It reports the
// rate achieved and the append wait's p50 and p99 (an append is published,
// so a stream can see it, before it returns). Each iteration is one run of
// d; -benchtime 1x runs one.
func benchPaced(b *testing.B, sandboxes int, rate float64, d time.Duration) {
	ctx := context.Background()
	obs := &countingObserver{}
	s := MustOpenStoreAt(b, filepath.Join(b.TempDir(), "sparkles.db"), Options{Observer: obs})
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%04d", i)
		mustCreate(b, s, ids[i])
	}
	every := time.Duration(float64(time.Second) / rate)
	var (
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
	)
	errs := make(chan error, sandboxes)
	m := startAppend(s.db)
	obs.reset()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		deadline := time.Now().Add(d)
		for i, id := range ids {
			wg.Go(func() {
				time.Sleep(every * time.Duration(i) / time.Duration(len(ids))) // the tick's phase
				tick := time.NewTicker(every)
				defer tick.Stop()
				var own []time.Duration
				for now := range tick.C {
					if now.After(deadline) {
						break
					}
					t0 := time.Now()
					if err := s.Append(ctx, id, []*sandbox.Event{benchEvent()}, nil); err != nil {
						errs <- err
						break
					}
					own = append(own, time.Since(t0))
				}
				mu.Lock()
				waits = append(waits, own...)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(waits)
	q := func(f float64) float64 {
		if len(waits) == 0 {
			return 0
		}
		return float64(waits[int(f*float64(len(waits)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "events/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	cpu := processCPU() - m.cpu
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(len(waits), 1)), "cpu-µs/event")
	b.ReportMetric(obs.perCommit(), "events/commit")
	b.ReportMetric(0, "ns/op")
}

// appendRun is what an append benchmark reads before its timed part.
type appendRun struct {
	db    *bbolt.DB
	stats bbolt.Stats
	cpu   time.Duration
	obs   *countingObserver // nil for bare bbolt
}

func startAppend(db *bbolt.DB) appendRun {
	return appendRun{db: db, stats: db.Stats(), cpu: processCPU()}
}

// report reports events/s; the page writes per event, which with the
// disk's bandwidth bounds what group commit can gain (a commit that wrote
// each sandbox's own buckets rewrote a few pages of each: events leaf, its
// branch, the sandbox's state page; through the WAL, a commit writes the
// WAL's tail pages, and materialization each sandbox's pages once per many
// events); and the CPU time the process spent per event, writers and store
// together, which with the machine's cores bounds the rate.
func (r appendRun) report(b *testing.B) {
	cpu := processCPU() - r.cpu
	after := r.db.Stats()
	d := after.Sub(&r.stats)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(d.TxStats.GetWrite())/float64(b.N), "writes/event")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
	if r.obs != nil {
		b.ReportMetric(r.obs.perCommit(), "events/commit")
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDB opens a bare bbolt file, with the store's options, holding one
// sandbox's events bucket, and returns the encoded record and state the
// store would write for an event. mmapSize, when not 0, maps that much of
// the file from the start (bbolt's InitialMmapSize).
func benchDB(b *testing.B, mmapSize int) (db *bbolt.DB, data, state []byte) {
	opts := boltOptions(0)
	opts.InitialMmapSize = mmapSize
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucket(bucketEvents); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketSandboxes)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	ev := benchEvent()
	if data, err = json.Marshal(ev.Data); err != nil {
		b.Fatal(err)
	}
	st := sandbox.State{Sandbox: newSandbox("c_0001")}
	folded, _ := sandbox.DecodeData(ev.Type, data)
	st.Apply(&sandbox.Event{ID: 1, Type: ev.Type, TS: ev.TS, SandboxID: "c_0001", TurnID: ev.TurnID, Data: folded})
	if state, err = json.Marshal(st); err != nil {
		b.Fatal(err)
	}
	return db, data, state
}

func putBenchEvent(tx *bbolt.Tx, ev *sandbox.Event, data []byte) error {
	events := tx.Bucket(bucketEvents)
	events.FillPercent = 1
	id, err := events.NextSequence()
	if err != nil {
		return err
	}
	value, _ := encodeRecord(id, ev, "c_0001", data)
	return events.Put(idKey(id), value)
}

func benchBaseline(b *testing.B) {
	db, data, state := benchDB(b, 0)
	ev := benchEvent()
	m := startAppend(db)
	b.ResetTimer()
	for range b.N {
		err := db.Update(func(tx *bbolt.Tx) error {
			if err := putBenchEvent(tx, ev, data); err != nil {
				return err
			}
			return tx.Bucket(bucketSandboxes).Put(keyState, state)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	m.report(b)
}

// benchCeiling puts all b.N events in one transaction. With the file
// mapped as bbolt maps it by default, the transaction grows the file many
// times, and at each new mapping bbolt copies every node the transaction has
// touched out of the old one (node.dereference, about half the CPU of this
// case), so the time per event grows with b.N. A mapping sized for the whole
// run from the start (mmapSize) measures the writes without that.
func benchCeiling(b *testing.B, mmapSize int) {
	db, data, state := benchDB(b, mmapSize)
	ev := benchEvent()
	m := startAppend(db)
	b.ResetTimer()
	err := db.Update(func(tx *bbolt.Tx) error {
		for range b.N {
			if err := putBenchEvent(tx, ev, data); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketSandboxes).Put(keyState, state)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	m.report(b)
}

// BenchmarkListSandboxes lists 2,000 sandboxes in pages of 1,000, as the
// webhook loop does once per listing of its endpoints (every 2 s while any
// endpoint receives every sandbox's events).
func BenchmarkListSandboxes(b *testing.B) {
	s := MustOpenStoreAt(b, filepath.Join(b.TempDir(), "bench.db"), Options{})
	for i := range 2000 {
		mustCreate(b, s, fmt.Sprintf("c_%026d", i))
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		n, after := 0, ""
		for {
			list, more, err := s.Sandboxes(ctx, after, 1000)
			if err != nil {
				b.Fatal(err)
			}
			n += len(list)
			if !more || len(list) == 0 {
				break
			}
			after = list[len(list)-1].ID
		}
		if n != 2000 {
			b.Fatalf("listed %d", n)
		}
	}
}
