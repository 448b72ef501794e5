package retention_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// fromPruner is a bolt store made to look like one that several processes
// prune: PruneFrom refuses a prune once the log is pruned past from, and
// records what it was asked. beforeCut, when set, runs ahead of the second
// scan of the store, which in a pass over one log is the one that finds
// the cut (the first counts what is new).
type fromPruner struct {
	*boltstore.Store
	asked     [][2]uint64 // from and through of every PruneFrom
	scans     int
	beforeCut func()
}

var _ retention.FromPruner = (*fromPruner)(nil)

func (s *fromPruner) Scan(ctx context.Context, id string, after uint64, limit int, fn func(sandbox.Record) error) error {
	if s.scans++; s.scans == 2 && s.beforeCut != nil {
		s.beforeCut()
	}
	return s.Store.Scan(ctx, id, after, limit, fn)
}

func (s *fromPruner) PruneFrom(ctx context.Context, id string, from, through uint64, batch int) (int, error) {
	s.asked = append(s.asked, [2]uint64{from, through})
	sb, err := s.Sandbox(ctx, id)
	if err != nil {
		return 0, err
	}
	if uint64(sb.PrunedThrough) > from {
		return 0, sandbox.Errorf(sandbox.ECursorPruned, "pruned through %d, past %d", sb.PrunedThrough, from)
	}
	return s.Prune(ctx, id, through, batch)
}

func TestPruneFrom(t *testing.T) {
	t.Run("Batches", func(t *testing.T) {
		// Each batch is on the condition that the log is pruned no further
		// than where the count of its cut began: the watermark the pass
		// listed, then the bound of the batch before.
		s, ids := toolLog(t, 25)
		fp := &fromPruner{Store: s}
		l := retention.New(retention.Config{Store: fp, MaxEvents: 5, Batch: 7})
		if got, want := mustRun(t, l, t0).Pruned, 20; got != want {
			t.Fatalf("pruned %d, want %d", got, want)
		}
		want := [][2]uint64{{0, ids[6]}, {ids[6], ids[13]}, {ids[13], ids[19]}}
		if !slices.Equal(fp.asked, want) {
			t.Fatalf("PruneFrom asked %v, want %v", fp.asked, want)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[20:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
	t.Run("PrunedMeanwhile", func(t *testing.T) {
		// Another process keeps the last 5 between this pass's count (20)
		// and its cut: what the pass reads then are those 5, all within
		// the 15 it counts as too many. Its prune is refused, and it is
		// no error of the pass.
		s, ids := toolLog(t, 20)
		fp := &fromPruner{Store: s, beforeCut: func() {
			if _, err := s.Prune(context.Background(), "c_1", ids[14], 200); err != nil {
				t.Error(err)
			}
		}}
		l := retention.New(retention.Config{Store: fp, MaxEvents: 5})
		if got := mustRun(t, l, t0).Pruned; got != 0 {
			t.Fatalf("pruned %d, want 0", got)
		}
		if want := [][2]uint64{{0, ids[19]}}; !slices.Equal(fp.asked, want) {
			t.Fatalf("PruneFrom asked %v, want %v", fp.asked, want)
		}
		// The next pass counts afresh: nothing is beyond the limit.
		if got := mustRun(t, l, t0).Pruned; got != 0 {
			t.Fatalf("next pass pruned %d, want 0", got)
		}
		if got, want := recordIDs(readAll(t, s, "c_1")), ids[15:]; !slices.Equal(got, want) {
			t.Fatalf("retained %v, want %v", got, want)
		}
	})
}
