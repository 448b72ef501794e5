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
