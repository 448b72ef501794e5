package bench

import (
	"context"
	"fmt"
	"sync"
)

// runIdle opens many SSE connections that then sit idle, and measures what
// they cost the server: its process's RSS and Go heap and stacks, before
// and after, in a child process so the client's side is not counted.
func runIdle(ctx context.Context, r *runner) error {
	n, sandboxes := pick(r, 10000, 200), pick(r, 100, 10)
	// Each connection is a descriptor on both sides; the child raises its
	// own limit.
	if lim := raiseFileLimit(uint64(n + 1024)); lim < uint64(n+64) {
		return fmt.Errorf("the open-file limit is %d; %d connections need %d (ulimit -n)", lim, n, n+64)
	}
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: sandboxes})
	if err != nil {
		return err
	}
	before, beforeGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}

	r.logf("opening %d streams over %d sandboxes", n, sandboxes)
	var mu sync.Mutex
	streams := make([]*stream, 0, n)
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	err = parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		// Small buffers: the client reads the snapshot and nothing more.
		s, err := openStream(ctx, c.addr, c.token, created.IDs[i%len(created.IDs)], -1, 4<<10)
		if err != nil {
			return fmt.Errorf("stream %d: %w", i, err)
		}
		mu.Lock()
		streams = append(streams, s)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	after, afterGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	if err := r.serverProfile(ctx, c); err != nil {
		return err
	}
	if afterGo.Streams != int64(n) {
		return fmt.Errorf("the server counts %d open streams, want %d", afterGo.Streams, n)
	}

	cond := fmt.Sprintf("%d streams over %d sandboxes, each past its snapshot, no events; server in a child process, "+
		"after a GC that returns freed memory to the OS", n, sandboxes)
	perUnitMem(r, "idle connection", n, cond, 32, before, after, beforeGo, afterGo)
	return nil
}

// perUnitMem adds the server's memory per unit (an idle connection, an
// idle sandbox) between two settled readings of n units: RSS, held to
// targetKiB, anonymous RSS, Go heap and stacks, and goroutines.
func perUnitMem(r *runner, unit string, n int, cond string, targetKiB float64, before, after procMem, beforeGo, afterGo childReply) {
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) / 1024 }
	rss := per(after.RSS, before.RSS)
	r.add(Figure{Name: "RSS per " + unit, Value: rss, Unit: "KiB",
		Conditions: fmt.Sprintf("%s; VmRSS %.1f -> %.1f MiB", cond, mib(before.RSS), mib(after.RSS)),
		Target:     fmt.Sprintf("<= %.0f KiB", targetKiB), Met: atLeast(targetKiB, rss)})
	r.add(Figure{Name: "anonymous RSS per " + unit, Value: per(after.Anon, before.Anon), Unit: "KiB",
		Conditions: fmt.Sprintf("RssAnon %.1f -> %.1f MiB: without bbolt's file mapping", mib(before.Anon), mib(after.Anon))})
	goBytes := func(m childReply) int64 { return int64(m.HeapInuse + m.StackInuse) }
	r.add(Figure{Name: "Go heap+stacks per " + unit, Value: per(goBytes(afterGo), goBytes(beforeGo)), Unit: "KiB",
		Conditions: fmt.Sprintf("heap in use %.1f -> %.1f MiB, stacks %.1f -> %.1f MiB",
			mib(int64(beforeGo.HeapInuse)), mib(int64(afterGo.HeapInuse)), mib(int64(beforeGo.StackInuse)), mib(int64(afterGo.StackInuse)))})
	r.add(Figure{Name: "goroutines per " + unit, Value: float64(afterGo.Goroutines-beforeGo.Goroutines) / float64(n), Unit: "",
		Conditions: fmt.Sprintf("%d -> %d goroutines", beforeGo.Goroutines, afterGo.Goroutines)})
}

// settledMem asks the child to collect garbage and reports its memory.
func settledMem(ctx context.Context, c *child) (procMem, childReply, error) {
	rep, err := c.do(ctx, childRequest{Op: "mem", GC: true})
	if err != nil {
		return procMem{}, childReply{}, err
	}
	m, err := c.mem()
	return m, rep, err
}
