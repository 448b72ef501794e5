package boltstore

import (
	"context"
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
}

func (o *countingObserver) Commit(events int, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events += events
	o.commits++
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
}
