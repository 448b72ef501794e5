package sandbox_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Ids made in a burst share their millisecond; they must still sort in the
// order they were made, or a listing in key order is not creation order.
func TestNewIDOrder(t *testing.T) {
	t.Run("OKTightLoop", func(t *testing.T) {
		prev := sandbox.NewID(sandbox.PrefixSandbox)
		for range 10000 {
			id := sandbox.NewID(sandbox.PrefixSandbox)
			if id <= prev {
				t.Fatalf("id %s after %s: ids must increase in the order they are made", id, prev)
			}
			prev = id
		}
	})
	t.Run("OKGoroutines", func(t *testing.T) {
		const workers, each = 16, 2000
		got := make([][]string, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]string, 0, each)
				for range each {
					ids = append(ids, sandbox.NewID(sandbox.PrefixTurn))
				}
				got[w] = ids
			}()
		}
		wg.Wait()
		seen := map[string]bool{}
		for w, ids := range got {
			for i, id := range ids {
				if seen[id] {
					t.Fatalf("id %s made twice", id)
				}
				seen[id] = true
				if i > 0 && id <= ids[i-1] {
					t.Fatalf("goroutine %d: id %s after %s", w, id, ids[i-1])
				}
			}
		}
	})
	t.Run("OKShape", func(t *testing.T) {
		id := sandbox.NewID(sandbox.PrefixApproval)
		if rest, ok := strings.CutPrefix(id, sandbox.PrefixApproval); !ok || len(rest) != 26 || strings.ToLower(rest) != rest {
			t.Fatalf("id %q, want %s and 26 lower-case characters", id, sandbox.PrefixApproval)
		}
	})
}
