package coordinator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestSandboxesCreationOrder creates sandboxes in a burst, many in the same
// millisecond, and lists them: whatever one caller created after another
// returned lists after it.
func TestSandboxesCreationOrder(t *testing.T) {
	// Without agents a create is one store write, so a burst is fast.
	e := newEnv(t, func(c *coordinator.Config) { c.Agents = nil })
	const workers, each = 8, 40
	made := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				sb, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{})
				if err != nil {
					t.Error(err)
					return
				}
				made[w] = append(made[w], sb.ID)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var listed []string
	for after := ""; ; {
		page, more, err := e.store.Sandboxes(context.Background(), after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range page {
			listed = append(listed, sb.ID)
		}
		if !more {
			break
		}
		after = page[len(page)-1].ID
	}
	if got, want := len(listed), workers*each; got != want {
		t.Fatalf("listed %d sandboxes, want %d", got, want)
	}
	pos := make(map[string]int, len(listed))
	for i, id := range listed {
		pos[id] = i
	}
	for w, ids := range made {
		for i := 1; i < len(ids); i++ {
			if pos[ids[i]] < pos[ids[i-1]] {
				t.Fatalf("caller %d created %s after %s; the list has it before", w, ids[i], ids[i-1])
			}
		}
	}
}
