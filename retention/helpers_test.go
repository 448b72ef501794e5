package retention_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var (
	_ retention.Store   = (*boltstore.Store)(nil)
	_ retention.Scanner = (*boltstore.Store)(nil)
)

// readOnly hides a store's Scan, so the loop reads it with Read.
type readOnly struct{ retention.Store }

// shortReads hides a store's Scan and answers every Read with at most 3
// records, as a store that pages by size may, whatever more there is.
type shortReads struct{ retention.Store }

func (s shortReads) Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error) {
	return s.Store.Read(ctx, id, after, min(limit, 3))
}

// t0 is the start of every test's timeline; clocks are always injected.
var t0 = time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)

// MustOpenStore opens a store on a fresh file in tb.TempDir, on the
// tests' clock, checked and closed when the test ends (bolttest).
func MustOpenStore(tb testing.TB) *boltstore.Store {
	tb.Helper()
	return bolttest.MustOpenAt(tb, filepath.Join(tb.TempDir(), "sparkles.db"), boltstore.Options{Now: func() time.Time { return t0 }})
}

func mustCreate(tb testing.TB, s *boltstore.Store, id string) {
	tb.Helper()
	sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: t0, UpdatedAt: t0}
	if err := s.Create(context.Background(), sb, nil); err != nil {
		tb.Fatal(err)
	}
}

func mustAppend(tb testing.TB, s *boltstore.Store, id string, evs ...*sandbox.Event) []uint64 {
	tb.Helper()
	if err := s.Append(context.Background(), id, evs, nil); err != nil {
		tb.Fatal(err)
	}
	ids := make([]uint64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

// toolEvent is an event outside any turn, which compaction never touches.
func toolEvent(ts time.Time, n int) *sandbox.Event {
	return &sandbox.Event{Type: sandbox.TypeToolUpdated, TS: ts, Data: &sandbox.ToolUpdated{
		ToolCallID: fmt.Sprintf("tool_%d", n), Title: "Read", Kind: sandbox.ToolKindRead, Status: sandbox.ToolCompleted,
	}}
}

// toolLog opens a store with one sandbox, c_1, whose log holds n events
// outside any turn, all at t0, and returns their ids.
func toolLog(tb testing.TB, n int) (*boltstore.Store, []uint64) {
	tb.Helper()
	s := MustOpenStore(tb)
	mustCreate(tb, s, "c_1")
	evs := make([]*sandbox.Event, n)
	for i := range evs {
		evs[i] = toolEvent(t0, i)
	}
	return s, mustAppend(tb, s, "c_1", evs...)
}

// readAll pages through every retained record of a sandbox.
func readAll(tb testing.TB, s retention.Store, id string) []sandbox.Record {
	tb.Helper()
	var all []sandbox.Record
	var after uint64
	for {
		recs, err := s.Read(context.Background(), id, after, 500)
		if err != nil {
			tb.Fatalf("read %s after %d: %v", id, after, err)
		}
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
		after = recs[len(recs)-1].ID
	}
}

func recordIDs(recs []sandbox.Record) []uint64 {
	ids := make([]uint64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

func mustSandbox(tb testing.TB, s *boltstore.Store, id string) sandbox.Sandbox {
	tb.Helper()
	sb, err := s.Sandbox(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	return sb
}

func mustRun(tb testing.TB, l *retention.Loop, now time.Time) retention.Result {
	tb.Helper()
	res, err := l.RunOnce(context.Background(), now)
	if err != nil {
		tb.Fatalf("retention pass: %v", err)
	}
	return res
}
