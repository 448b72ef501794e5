package natsstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestRetentionRace runs the retention of two nodes over the same sandbox
// at the same moment, as the retention loop of every node does: the deletes
// one node makes first are no error for the other, and together they
// remove each event once.
func TestRetentionRace(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	a, b := mustOpenChecked(t, url), mustOpenChecked(t, url)
	mustCreate(t, a, "c_1")
	ids := mustAppend(t, a, "c_1", messages("m", 60)...)
	storetest.WaitHead(t, b, "c_1", ids[len(ids)-1])

	// both runs fn on a and on b at once and returns what they removed.
	both := func(fn func(s *natsstore.Store) (int, error)) int {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		start := make(chan struct{})
		for _, s := range []*natsstore.Store{a, b} {
			wg.Go(func() {
				<-start
				n, err := fn(s)
				if err != nil {
					t.Errorf("retention of two nodes at once: %v", err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return total
	}

	t.Run("Compact", func(t *testing.T) {
		victims := ids[10:40]
		removed := both(func(s *natsstore.Store) (int, error) { return s.Compact(ctx, "c_1", victims) })
		if removed != len(victims) {
			t.Fatalf("the two nodes removed %d events together, want %d", removed, len(victims))
		}
	})
	t.Run("Prune", func(t *testing.T) {
		removed := both(func(s *natsstore.Store) (int, error) { return s.Prune(ctx, "c_1", ids[49], 200) })
		if want := 10 + 10; removed != want { // ids[0:10] and ids[40:50]
			t.Fatalf("the two nodes pruned %d events together, want %d", removed, want)
		}
		if got := readIDs(t, a, "c_1"); len(got) != 10 || got[0] != ids[50] {
			t.Fatalf("log after pruning through %d: %v", ids[49], got)
		}
	})
	t.Run("Loops", func(t *testing.T) {
		// The loops of two nodes, each keeping 5 events of every sandbox,
		// pass over one the test keeps appending to.
		mustCreate(t, a, "c_2")
		var loops []*retention.Loop
		for _, s := range []*natsstore.Store{a, b} {
			loops = append(loops, retention.New(retention.Config{Store: s, MaxEvents: 5, Logger: slog.New(slog.DiscardHandler)}))
		}
		for round := range 5 {
			mustAppend(t, a, "c_2", messages(fmt.Sprint("r", round), 20)...)
			var wg sync.WaitGroup
			for _, l := range loops {
				wg.Go(func() {
					if _, err := l.RunOnce(ctx, t0); err != nil {
						t.Errorf("retention pass of round %d: %v", round, err)
					}
				})
			}
			wg.Wait()
		}
		if got := readIDs(t, a, "c_2"); len(got) != 5 {
			t.Fatalf("log after the passes holds %d events, want 5", len(got))
		}
	})
}

// messages returns n message snapshots of n different messages.
func messages(prefix string, n int) []*sandbox.Event {
	evs := make([]*sandbox.Event, n)
	for i := range evs {
		evs[i] = &sandbox.Event{Type: sandbox.TypeMessageUpdated, TS: t0, Data: &sandbox.MessageUpdated{
			MessageID: fmt.Sprintf("msg_%s%d", prefix, i), PartID: "part_1", Kind: sandbox.PartText, Text: "text"}}
	}
	return evs
}
