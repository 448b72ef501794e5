package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// runTurnCost measures whether an event costs the server the same late in
// a long turn as early in it: one sandbox whose agent, a process of its
// own, announces a new tool call with every update (floodNew), through
// translation, the coordinator, group commit and the store to an SSE
// subscriber. The server is a child process; its CPU time, read from its
// CPU-time clock, is divided by the events the subscriber read over a
// window that starts at the turn's 100th tool call and over one that
// starts at its 100,000th. A state that grows with the turn makes the
// second window dearer; the ratio of the two is held to 1.2.
func runTurnCost(ctx context.Context, r *runner) error {
	early, late := int64(100), pick(r, int64(100000), 3000)
	window := pick(r, int64(5000), 500)
	runs := pick(r, 3, 1)
	var got []turnCost
	for i := range runs {
		r.logf("run %d of %d: a turn of %d tool calls", i+1, runs, late+window)
		c, err := measureTurnCost(ctx, r, early, late, window)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		got = append(got, c)
	}
	s := summarizeTurnCost(got)
	cond := func(at int64, w turnWindow) string {
		return fmt.Sprintf("1 producer: an ACP agent process announcing a new tool call with every tool_call update, each completed, as fast as its stdout takes them; "+
			"the server's CPU time (its process CPU clock: every thread, user and system; not the agent's) over the %s events from the turn's %s to its %s "+
			"(the turn's first few events are its start), divided by them; median of %d runs, each a fresh server; %.0f events/s; "+
			"server VmRSS %.1f MiB at the window's end, %.1f MiB anonymous, %.1f MiB of mapped files (the store's mmap)",
			thousands(window), ordinal(at), ordinal(at+window), runs, w.rate, mib(w.mem.RSS), mib(w.mem.Anon), mib(w.mem.File))
	}
	r.add(Figure{Name: "server CPU per event, tool call 100 of a turn", Value: us(s.early.cpu), Unit: "µs", Conditions: cond(early, s.early)})
	r.add(Figure{Name: fmt.Sprintf("server CPU per event, tool call %s of a turn", thousands(late)), Value: us(s.late.cpu), Unit: "µs", Conditions: cond(late, s.late)})
	f := Figure{Name: fmt.Sprintf("server CPU per event, tool call %s against 100", thousands(late)), Value: s.ratio, Unit: "x",
		Conditions: fmt.Sprintf("the median over %d runs of each run's ratio of the two figures above (runs: %s)", runs, formatRatios(s.ratios)),
		Target:     "<= 1.2x", Met: atLeast(1.2, s.ratio)}
	r.add(f)
	return nil
}

// turnWindow is what one window of a turn cost the server.
type turnWindow struct {
	cpu  time.Duration // per event
	rate float64       // events/s
	mem  procMem       // at the window's end
}

// turnCost is one run: a window early in the turn and one late.
type turnCost struct{ early, late turnWindow }

// turnCostSummary holds the medians over runs: of each window's values,
// and of each run's ratio late/early, which is what is held to the target
// since both windows of a run share a server and the machine's load.
type turnCostSummary struct {
	early, late turnWindow
	ratio       float64
	ratios      []float64
}

func summarizeTurnCost(runs []turnCost) turnCostSummary {
	var s turnCostSummary
	pickMedian := func(get func(turnCost) turnWindow) turnWindow {
		ws := make([]turnWindow, len(runs))
		for i, c := range runs {
			ws[i] = get(c)
		}
		slices.SortFunc(ws, func(a, b turnWindow) int { return int(a.cpu - b.cpu) })
		return ws[len(ws)/2]
	}
	s.early = pickMedian(func(c turnCost) turnWindow { return c.early })
	s.late = pickMedian(func(c turnCost) turnWindow { return c.late })
	for _, c := range runs {
		if c.early.cpu > 0 {
			s.ratios = append(s.ratios, float64(c.late.cpu)/float64(c.early.cpu))
		}
	}
	if len(s.ratios) > 0 {
		sorted := slices.Sorted(slices.Values(s.ratios))
		s.ratio = sorted[len(sorted)/2]
	}
	return s
}

// measureTurnCost runs one flooding turn on a fresh child server and
// measures the windows [early, early+window) and [late, late+window) of
// its events.
func measureTurnCost(ctx context.Context, r *runner, early, late, window int64) (turnCost, error) {
	c, closeServer, err := r.child(ctx, EnvChildAgent+"=flood")
	if err != nil {
		return turnCost{}, err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: 1})
	if err != nil {
		return turnCost{}, err
	}
	sub, err := subscribe(ctx, c.addr, c.token, created.IDs[0], -1)
	if err != nil {
		return turnCost{}, err
	}
	defer sub.close()
	if _, err := c.do(ctx, childRequest{Op: "floodnew", IDs: created.IDs}); err != nil {
		return turnCost{}, err
	}
	pid := c.cmd.Process.Pid
	type mark struct {
		cpu time.Duration
		at  time.Time
	}
	// at waits until the subscriber has read n events and reads the
	// server's CPU clock: both ends of a window lag the server alike.
	at := func(n int64) (mark, error) {
		if err := waitEvents(ctx, sub, n); err != nil {
			return mark{}, err
		}
		cpu, err := processCPU(pid)
		return mark{cpu: cpu, at: time.Now()}, err
	}
	measure := func(from int64) (turnWindow, error) {
		m0, err := at(from)
		if err != nil {
			return turnWindow{}, err
		}
		m1, err := at(from + window)
		if err != nil {
			return turnWindow{}, err
		}
		mem, err := readProcMem(pid)
		if err != nil {
			return turnWindow{}, err
		}
		return turnWindow{cpu: (m1.cpu - m0.cpu) / time.Duration(window), rate: perSecond(window, m1.at.Sub(m0.at)), mem: mem}, nil
	}
	var tc turnCost
	if tc.early, err = measure(early); err != nil {
		return tc, err
	}
	if tc.late, err = measure(late); err != nil {
		return tc, err
	}
	_, err = c.do(ctx, childRequest{Op: "unflood"})
	return tc, err
}

// waitEvents waits until sub has read n events.
func waitEvents(ctx context.Context, sub *subscriber, n int64) error {
	return waitRead(ctx, &sub.count, sub.signal, sub.done, func() error { return sub.err }, n, "events")
}

// waitRead waits until a reader of a stream, Sparkles' or Mercure's, has
// read n items (count, poked on signal), or says why its stream ended
// (done closed, err set before) first.
func waitRead(ctx context.Context, count *atomic.Int64, signal, done <-chan struct{}, err func() error, n int64, what string) error {
	for count.Load() < n {
		select {
		case <-signal:
		case <-done:
			if count.Load() >= n {
				return nil
			}
			return fmt.Errorf("stream ended after %d %s, want %d: %v", count.Load(), what, n, err())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s %d (have %d): %w", what, n, count.Load(), ctx.Err())
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ordinal spells n as a position: 1st, 2nd, 100th, 100,000th.
func ordinal(n int64) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return thousands(n) + suffix
}

func formatRatios(rs []float64) string {
	var b []byte
	for i, v := range rs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%.2fx", v)
	}
	return string(b)
}
