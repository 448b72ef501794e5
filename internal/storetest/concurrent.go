package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func testConcurrent(t *testing.T, open Opener) {
	Concurrent(t, openStore(t, open), Concurrency{Writers: 24, Sandboxes: 6, Appends: 15})
}

// Concurrency sizes Concurrent and adds what a store can check beyond the
// shared contract.
type Concurrency struct {
	Writers, Sandboxes, Appends int
	// Dense: the ids of a log are 1, 2, 3, … with no gap.
	Dense bool
	// OnRead, when set, sees every record a tailing reader reads; an error
	// fails the test.
	OnRead func(id string, rec sandbox.Record) error
}

// Concurrent runs writers over sandboxes (created here) with a reader
// tailing each log: every writer gets increasing ids, no id is handed out
// twice, nothing acknowledged is lost, and each reader sees its log in
// order without a gap or a duplicate.
func Concurrent(t *testing.T, s Store, c Concurrency) {
	writers, sandboxes, appends := c.Writers, c.Sandboxes, c.Appends
	ctx := context.Background()
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
					if rec.ID <= cursor || c.Dense && rec.ID != cursor+1 {
						readErrs <- fmt.Errorf("%s: read id %d after %d", id, rec.ID, cursor)
						return
					}
					if c.OnRead != nil {
						if err := c.OnRead(id, rec); err != nil {
							readErrs <- err
							return
						}
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
		if c.Dense && (list[0] != 1 || list[len(list)-1] != uint64(len(list))) {
			t.Fatalf("%s: ids handed out %v, want each of 1..%d once", id, list, len(list))
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
