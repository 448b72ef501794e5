package boltstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestZZProbe(t *testing.T) {
	for _, writers := range []int{16, 256} {
		s := MustOpenStore(t)
		ids := make([]string, writers)
		for i := range ids {
			ids[i] = fmt.Sprintf("c_%04d", i)
			mustCreate(t, s, ids[i])
		}
		// warm: 10 events each so events buckets are not inline
		for _, id := range ids {
			mustAppend(t, s, id, textEvents(10)...)
		}
		var commits, events atomic.Int64
		s.afterCommit = func(m map[string]uint64) { commits.Add(1) }
		before := s.db.Stats()
		var next atomic.Int64
		var wg sync.WaitGroup
		N := int64(5000)
		t0 := time.Now()
		for _, id := range ids {
			wg.Go(func() {
				for next.Add(1) <= N {
					s.Append(context.Background(), id, []*sandbox.Event{benchEvent()}, nil)
					events.Add(1)
				}
			})
		}
		wg.Wait()
		el := time.Since(t0)
		after := s.db.Stats(); d := after.Sub(&before)
		t.Logf("writers=%d events=%d commits=%d  %.0f ev/s  writes=%d pages/commit=%.1f pageAlloc=%dKB/commit writeTime/commit=%v",
			writers, events.Load(), commits.Load(), float64(N)/el.Seconds(), d.TxStats.GetWrite(), float64(d.TxStats.GetWrite())/float64(commits.Load()),
			d.TxStats.GetPageAlloc()/1024/int64(commits.Load()), d.TxStats.GetWriteTime()/time.Duration(commits.Load()))
	}
}
