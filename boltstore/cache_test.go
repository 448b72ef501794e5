package boltstore

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// cacheHeld is what the cache accounts for, what the rings of all
// sandboxes hold, and the sandboxes of the list from newest to oldest.
func (s *Store) cacheHeld() (accounted, held int, order []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make(map[*entry]string, len(s.sandboxes))
	for id, e := range s.sandboxes {
		held += e.ring.bytes
		ids[e] = id
	}
	for e := s.cache.newest; e != nil; e = e.older {
		order = append(order, ids[e])
	}
	return s.cache.bytes, held, order
}

// TestCacheBound: the rings of all sandboxes together hold at most
// CacheBytes, the sandboxes written least recently losing theirs first,
// and every read still returns every event, from the file where memory no
// longer has it.
func TestCacheBound(t *testing.T) {
	const budget = 100 << 10
	s := MustOpenStoreAt(t, filepath.Join(t.TempDir(), "sparkles.db"), Options{CacheBytes: budget})
	text := strings.Repeat("x", 900)
	var ids []string
	per := 0 // the bytes of one sandbox's 30 events
	for i := range 40 {
		id := fmt.Sprintf("c_%02d", i)
		ids = append(ids, id)
		mustCreate(t, s, id)
		for range 3 {
			evs := make([]*sandbox.Event, 0, 10)
			for range 10 {
				evs = append(evs, textEvent("", "p", text))
			}
			mustAppend(t, s, id, evs...)
		}
		accounted, held, order := s.cacheHeld()
		if i == 0 {
			per = held
		}
		if accounted != held {
			t.Fatalf("after %s: the cache accounts for %d bytes, the rings hold %d", id, accounted, held)
		}
		if held > budget {
			t.Fatalf("after %s: the rings hold %d bytes, over the bound of %d", id, held, budget)
		}
		if order[0] != id {
			t.Fatalf("after writing %s, the newest in the cache is %s", id, order[0])
		}
	}
	// Each sandbox's ring holds its 30 events, per bytes; as many whole
	// rings as fit stay, those of the sandboxes written last.
	_, held, order := s.cacheHeld()
	if fit := budget / per; len(order) != fit || held != fit*per {
		t.Fatalf("the cache holds %d bytes of %d sandboxes (%v), want the %d written last, %d bytes each", held, len(order), order, fit, per)
	}
	for i, id := range order {
		if id != ids[len(ids)-1-i] {
			t.Fatalf("cache order %v, want the sandboxes written last, newest first", order)
		}
	}
	for _, id := range ids {
		if got := recordIDs(mustRead(t, s, id, 0, 1000)); !slices.Equal(got, seq(1, 30)) {
			t.Fatalf("%s reads %v, want 1..30", id, got)
		}
		// A tail read of a sandbox whose ring was emptied.
		if got := recordIDs(mustRead(t, s, id, 25, 1000)); !slices.Equal(got, seq(26, 30)) {
			t.Fatalf("%s after 25 reads %v, want 26..30", id, got)
		}
	}
	// A sandbox written again is the newest, its ring holding the new
	// records from where the old ones ended; its old ones come from the file.
	mustAppend(t, s, ids[0], textEvent("", "p", text))
	if _, _, order := s.cacheHeld(); order[0] != ids[0] {
		t.Fatalf("after writing %s again the cache order is %v", ids[0], order)
	}
	if got := recordIDs(mustRead(t, s, ids[0], 0, 1000)); !slices.Equal(got, seq(1, 31)) {
		t.Fatalf("%s reads %v, want 1..31", ids[0], got)
	}
	// A dropped sandbox leaves the cache with what its ring held.
	if err := s.Drop(t.Context(), ids[len(ids)-1]); err != nil {
		t.Fatal(err)
	}
	accounted, held, order := s.cacheHeld()
	if accounted != held || slices.Contains(order, ids[len(ids)-1]) {
		t.Fatalf("after a drop: accounted %d, held %d, order %v", accounted, held, order)
	}
}
