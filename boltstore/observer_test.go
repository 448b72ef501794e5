package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

type countingObserver struct {
	mu      sync.Mutex
	events  int
	commits int
	bad     []string // commits whose durations do not add up
}

func (o *countingObserver) Commit(events int, took, sync time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events += events
	o.commits++
	if sync <= 0 || sync > took {
		o.bad = append(o.bad, fmt.Sprintf("sync %v of a commit that took %v", sync, took))
	}
}

func (o *countingObserver) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events, o.commits = 0, 0
}

// perCommit is the mean number of events a commit made durable.
func (o *countingObserver) perCommit() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return float64(o.events) / float64(max(o.commits, 1))
}

func TestObserver(t *testing.T) {
	obs := &countingObserver{}
	s := MustOpenStoreAt(t, filepath.Join(t.TempDir(), "obs.db"), Options{Observer: obs})
	mustCreate(t, s, "c_obs")
	for i := 0; i < 3; i++ {
		ev := &sandbox.Event{Type: sandbox.TypeSandboxError, Data: &sandbox.SandboxError{Code: "internal", Message: "x"}}
		if err := s.Append(context.Background(), "c_obs", []*sandbox.Event{ev, ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if got, want := obs.events, 6; got != want {
		t.Fatalf("observed events = %d, want %d", got, want)
	}
	if obs.commits < 1 || obs.commits > 3 {
		t.Fatalf("observed commits = %d, want 1 to 3", obs.commits)
	}
	if len(obs.bad) > 0 {
		t.Fatalf("observed write times: %v", obs.bad)
	}
}

func TestRingBounds(t *testing.T) {
	var r ring
	r.from = 1
	big := make([]byte, 3<<20)
	for id := uint64(1); id <= 10; id++ {
		r.push(sandbox.Record{ID: id, JSON: big}, 1024)
	}
	if r.bytes > ringMaxBytes+len(big) {
		t.Fatalf("ring holds %d bytes, bound %d", r.bytes, ringMaxBytes)
	}
	h := r.held()
	if h[0].ID != r.from || h[len(h)-1].ID != 10 || len(h) >= 10 {
		t.Fatalf("ring holds ids %d..%d with from %d", h[0].ID, h[len(h)-1].ID, r.from)
	}
	if r.covers(r.from - 2) {
		t.Fatal("ring claims records it evicted")
	}
	for id := uint64(11); id <= 2000; id++ {
		r.push(sandbox.Record{ID: id, JSON: []byte("x")}, 100)
	}
	h = r.held()
	if got, want := len(h), 100; got != want {
		t.Fatalf("held %d records, want %d", got, want)
	}
	if h[0].ID != 1901 || h[99].ID != 2000 || r.from != 1901 {
		t.Fatalf("held ids %d..%d, from %d", h[0].ID, h[99].ID, r.from)
	}
	if len(r.buf) > 300 {
		t.Fatalf("ring slice grew to %d for 100 held records", len(r.buf))
	}
	if got := r.read(1950, 10); len(got) != 10 || got[0].ID != 1951 {
		t.Fatalf("read after 1950: %d records from %d", len(got), got[0].ID)
	}
}
