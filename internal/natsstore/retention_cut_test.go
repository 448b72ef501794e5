package natsstore_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Several nodes prune one store: each node's loop prunes on a condition.
var _ retention.FromPruner = (*natsstore.Store)(nil)

// beforeCut is a store as one node's retention loop sees it. A pass reads
// the log of a sandbox twice: once to count what is new, then from its
// pruned_through to find the cut that keeps MaxEvents. Before the second
// read of sandbox id, between runs (once per beforeCut).
type beforeCut struct {
	*natsstore.Store
	id      string
	reads   int
	between func()
}

func (c *beforeCut) Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error) {
	if id == c.id {
		if c.reads++; c.reads == 2 {
			c.between()
		}
	}
	return c.Store.Read(ctx, id, after, limit)
}

// TestRetentionCut makes on purpose the interleaving that lost a log under
// load (TestRetentionRace/Loops): node A's retention loop counts a
// sandbox's log; node B's loop, with the same limit, prunes it and purges;
// only then does A read the log from the pruned_through it listed, to find
// its cut. The read serves what is left after B's purge, with no
// cursor_pruned: for a cursor of 0, which is never refused, and for one
// below a watermark that A's watch has not delivered yet. A's count still
// holds the events B removed, so its cut lands as many events too far, and
// together the two nodes keep fewer than the limit. Each node's prune must
// count for nothing once the log was pruned past where it counted from.
func TestRetentionCut(t *testing.T) {
	t.Run("FromStart", func(t *testing.T) { testRetentionCut(t, false) })
	t.Run("LaggingWatch", func(t *testing.T) { testRetentionCut(t, true) })
}

func testRetentionCut(t *testing.T, lag bool) {
	const keep = 5
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	a, b := mustOpenChecked(t, url), mustOpenChecked(t, url)
	mustCreate(t, a, "c_1")
	ids := mustAppend(t, a, "c_1", messages("a", 20)...)
	if lag {
		// Pruned once before, so A's cursor is not 0.
		if _, err := a.Prune(ctx, "c_1", ids[len(ids)-keep-1], 0); err != nil {
			t.Fatal(err)
		}
		// From here on a's watch delivers nothing (until the test ends):
		// a knows of B's writes only what it reads from the bucket itself.
		release := make(chan struct{})
		natsstore.SetWatchHook(a, func(string) { <-release })
		t.Cleanup(sync.OnceFunc(func() { close(release) })) // before a closes
		ids = append(ids, mustAppend(t, a, "c_1", messages("b", 20)...)...)
	}
	storetest.WaitHead(t, b, "c_1", ids[len(ids)-1])

	discard := slog.New(slog.DiscardHandler)
	onB := retention.New(retention.Config{Store: b, MaxEvents: keep, Logger: discard})
	onA := retention.New(retention.Config{Store: &beforeCut{Store: a, id: "c_1", between: func() {
		if _, err := onB.RunOnce(ctx, t0); err != nil {
			t.Errorf("B's pass: %v", err)
		}
	}}, MaxEvents: keep, Logger: discard})
	if _, err := onA.RunOnce(ctx, t0); err != nil {
		t.Errorf("A's pass: %v", err)
	}
	if got, want := readIDs(t, b, "c_1"), ids[len(ids)-keep:]; !slices.Equal(got, want) {
		t.Fatalf("log after the passes of A and B: %v, want the last %d: %v", got, keep, want)
	}
}
