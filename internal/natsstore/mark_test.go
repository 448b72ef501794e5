package natsstore_test

import (
	"context"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/retention"
)

// The retention loop keeps its compaction marks in the store, so that its
// first pass after a start reads each log from its mark.
var _ retention.Marker = (*natsstore.Store)(nil)

// TestCompactionMarks: a mark survives a new store on the same NATS (the
// next start, or another node taking the sandbox), a mark for a sandbox
// that is gone is not kept, and a drop takes the sandbox's mark with it.
func TestCompactionMarks(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	if m, err := s.CompactionMark("c_1"); err != nil || m != 0 {
		t.Fatalf("mark before any = %d, %v; want 0", m, err)
	}
	if err := s.SetCompactionMarks(ctx, map[string]uint64{"c_1": 42, "c_2": 7, "c_gone": 9}); err != nil {
		t.Fatal(err)
	}
	other := mustOpenChecked(t, url)
	for id, want := range map[string]uint64{"c_1": 42, "c_2": 7, "c_gone": 0} {
		if m, err := other.CompactionMark(id); err != nil || m != want {
			t.Fatalf("%s: mark = %d, %v; want %d", id, m, err, want)
		}
	}
	if err := s.Drop(ctx, "c_2"); err != nil {
		t.Fatal(err)
	}
	if m, err := other.CompactionMark("c_2"); err != nil || m != 0 {
		t.Fatalf("mark of a dropped sandbox = %d, %v; want 0", m, err)
	}
}
