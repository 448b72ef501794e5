package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// testConcurrent runs many writers over several sandboxes with a reader
// tailing each log: every writer gets increasing ids, no id is handed out
// twice, nothing acknowledged is lost, and each reader sees its log in
// order without a gap or a duplicate.
func testConcurrent(t *testing.T, open Opener) {
	const (
		writers   = 24
		sandboxes = 6
		appends   = 15
	)
	ctx := context.Background()
	s := openStore(t, open)
	ids := make([]string, sandboxes)
	for i := range ids {
		ids[i] = fmt.Sprintf("c_%02d", i)
		mustCreate(t, s, ids[i])
	}

	stop := make(chan struct{})
	var readers sync.WaitGroup
	seen := make([][]uint64, sandboxes)
	readErrs := make(chan error, sandboxes)
	for i, id := range ids {
		readers.Go(func() {
			var cursor uint64
			for {
				wait := s.Wait(id)
				recs, err := s.Read(ctx, id, cursor, 5)
				if err != nil {
					readErrs <- err
					return
				}
				for _, rec := range recs {
					if rec.ID <= cursor {
						readErrs <- fmt.Errorf("%s: read id %d after %d", id, rec.ID, cursor)
						return
					}
					cursor = rec.ID
					seen[i] = append(seen[i], rec.ID)
				}
				if len(recs) > 0 {
					continue
				}
				select {
				case <-wait:
				case <-stop:
					if head, _ := s.Head(id); cursor == head.LastEventID {
						return
					}
				}
			}
		})
	}

	var wg sync.WaitGroup
	got := make([][]uint64, writers)
	writeErrs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			id := ids[w%sandboxes]
			for i := range appends {
				evs := textEvents(1 + i%3)
				if err := s.Append(ctx, id, evs, nil); err != nil {
					writeErrs <- err
					return
				}
				got[w] = append(got[w], eventIDs(evs)...)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(writeErrs)
	close(readErrs)
	for err := range writeErrs {
		t.Fatal(err)
	}
	for err := range readErrs {
		t.Fatal(err)
	}

	perSandbox := make([][]uint64, sandboxes)
	for w, list := range got {
		if !increasing(list) {
			t.Fatalf("writer %d got ids out of order: %v", w, list)
		}
		perSandbox[w%sandboxes] = append(perSandbox[w%sandboxes], list...)
	}
	for i, id := range ids {
		list := perSandbox[i]
		slices.Sort(list)
		if n := len(slices.Compact(slices.Clone(list))); n != len(list) {
			t.Fatalf("%s: an id was handed out twice: %v", id, list)
		}
		if got := recordIDs(readAll(t, s, id)); !slices.Equal(got, list) {
			t.Fatalf("%s: log %v, want the acknowledged %v", id, got, list)
		}
		if !slices.Equal(seen[i], list) {
			t.Fatalf("%s: the tailing reader saw %v, want %v", id, seen[i], list)
		}
		st, err := s.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := uint64(st.Sandbox.LastEventID), list[len(list)-1]; got != want {
			t.Fatalf("%s: state last_event_id = %d, want %d", id, got, want)
		}
	}
}
