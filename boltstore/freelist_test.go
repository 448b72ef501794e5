package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// BenchmarkAppendFreePages is BenchmarkAppend's 256 writers on a file with
// many free pages: 256 sandboxes of 1,600 events each, half of each pruned
// as retention would. A commit that writes bbolt's free-page list writes
// all of it, so this is where writing it costs most (see doc.go, The file
// under the store).
func BenchmarkAppendFreePages(b *testing.B) {
	ctx := context.Background()
	const writers, fill = 256, 1600
	obs := &countingObserver{}
	s := MustOpenStoreAt(b, filepath.Join(b.TempDir(), "sparkles.db"), Options{Observer: obs})
	ids := make([]string, writers)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%04d", i)
		mustCreate(b, s, ids[i])
		for n := 0; n < fill; n += 100 {
			evs := make([]*sandbox.Event, 100)
			for j := range evs {
				evs[j] = benchEvent()
			}
			if err := s.Append(ctx, ids[i], evs, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		if _, err := s.Prune(ctx, id, fill/2, fill); err != nil {
			b.Fatal(err)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	appendFromAll(b, s, obs, ids)
	b.ReportMetric(float64(st.FreePages), "free-pages-before")
}

// crashAfterWrites appends to a new store at path as writes would, with
// every tenth event pruned away so that pages are freed, then closes it as
// a crash after its last commit leaves the file.
func crashAfterWrites(t *testing.T, path string, limits walLimits) (heads map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	s := mustOpenLimits(t, path, Options{}, limits)
	heads = make(map[string]uint64)
	for i := range 8 {
		id := fmt.Sprintf("c_%d", i)
		mustCreate(t, s, id)
		for range 20 {
			mustAppend(t, s, id, textEvents(50)...)
		}
		if _, err := s.Prune(ctx, id, 500, 1000); err != nil {
			t.Fatal(err)
		}
	}
	s.hooks().keepWAL.Store(true)
	for i := range 8 {
		id := fmt.Sprintf("c_%d", i)
		mustAppend(t, s, id, textEvents(3)...)
		head, err := s.Head(id)
		if err != nil {
			t.Fatal(err)
		}
		heads[id] = head.LastEventID
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return heads
}

// wholeCheck reports whether the open of the file at path checks every
// page, which it does when the last commit left no free-page list, because
// bbolt then scans every page to rebuild it.
func wholeCheck(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	whole, err := verifyOpen(f, path, false)
	if err != nil {
		t.Fatal(err)
	}
	return whole
}

// reopenHeads opens the file as the next server would and checks that
// every append the crashed one acknowledged is there, and that the next
// ids continue them.
func reopenHeads(t *testing.T, path string, heads map[string]uint64) {
	t.Helper()
	s := MustOpenStoreAt(t, path, Options{})
	for id, want := range heads {
		head, err := s.Head(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := head.LastEventID; got != want {
			t.Errorf("%s: last id %d after the crash, want %d", id, got, want)
		}
		if got := mustAppend(t, s, id, textEvents(1)...); got[0] != want+1 {
			t.Errorf("%s: next id %d, want %d", id, got[0], want+1)
		}
	}
}

func TestCrashFreelist(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		// The commits keep bbolt's free-page list on disk: the file a
		// crash leaves opens as a closed one does, reading that list.
		path := filepath.Join(t.TempDir(), "sparkles.db")
		heads := crashAfterWrites(t, path, walLimits{})
		if wholeCheck(t, path) {
			t.Error("the file a crash left has no free-page list: its open checks every page and bbolt scans every page")
		}
		reopenHeads(t, path, heads)
	})
	t.Run("LongList", func(t *testing.T) {
		// Past freelistMax the commits leave the list out, and the open
		// after a crash checks and scans every page, losing nothing.
		path := filepath.Join(t.TempDir(), "sparkles.db")
		heads := crashAfterWrites(t, path, walLimits{freelistMax: 1})
		if !wholeCheck(t, path) {
			t.Error("a commit wrote a free-page list longer than freelistMax")
		}
		reopenHeads(t, path, heads)
	})
}

// TestWALMutateHead: a mutate that changes only the state's head (a status
// change, as at every stop) writes the head into the WAL, not the state's
// lists, and a replay after a crash restores the whole state.
func TestWALMutateHead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	const id = "c_1"
	mustCreate(t, s, id)
	title := strings.Repeat("t", 1000)
	for n := 0; n < 150; n += 50 {
		evs := make([]*sandbox.Event, 50)
		for i := range evs {
			evs[i] = &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: "turn_1", Data: &sandbox.ToolUpdated{
				ToolCallID: fmt.Sprintf("tool_%03d", n+i), Title: title, Kind: "read", Status: sandbox.ToolRunning}}
		}
		mustAppend(t, s, id, evs...)
	}
	mustAppend(t, s, id, textEvents(20)...)
	s.hooks().keepWAL.Store(true)
	if err := s.flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := s.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	full, err := json.Marshal(before)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Append(ctx, id, nil, func(st *sandbox.State) error {
		st.Sandbox.Status, st.Sandbox.StatusDetail = sandbox.StatusStopped, "stopped by a test"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var entry int
	err = s.db.View(func(tx *bbolt.Tx) error {
		_, v := tx.Bucket(bucketWAL).Cursor().Last()
		entry = len(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if entry == 0 || entry > 4<<10 {
		t.Errorf("the WAL entry of a status change is %d bytes for a state of %d: want the head, at most 4 KiB", entry, len(full))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := MustOpenStoreAt(t, path, Options{})
	got, err := r.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := before
	want.Sandbox.Status, want.Sandbox.StatusDetail = sandbox.StatusStopped, "stopped by a test"
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("state after the replay:\n%s\nwant\n%s", g, w)
	}
}
