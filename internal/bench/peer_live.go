package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The peer scenario's parts on running servers: durable events/s with
// many producers, one stream fanned out to many subscribers, and the
// memory an idle connection costs.

// peerProducers measures durable events/s with n producers: on Sparkles
// an agent process per sandbox flooding tool_call updates during a turn,
// on Mercure a publisher per topic, each waiting for its publish to be
// acknowledged. Both count the events at an SSE subscriber per
// sandbox or topic, over the same window once every subscriber has seen
// its first event. Sparkles is measured twice, before and after Mercure:
// with agents that cycle through floodTools tool calls, and with agents
// that announce a new tool call with every update, as real ones do, whose
// window starts once the turns hold peerLongTurn tool calls in all.
func peerProducers(ctx context.Context, r *runner, n int, target bool) error {
	d := pick(r, 5*time.Second, 300*time.Millisecond)
	s, err := sparklesProducers(ctx, r, n, d, false, 0)
	if err != nil {
		return fmt.Errorf("sparkles: %w", err)
	}
	size := int(s.bytes / max(s.events, 1))
	m, err := mercureProducers(ctx, r, n, d, size)
	if err != nil {
		return fmt.Errorf("mercure: %w", err)
	}
	warm := int64(pick(r, peerLongTurn, 200))
	fresh, err := sparklesProducers(ctx, r, n, d, true, warm)
	if err != nil {
		return fmt.Errorf("sparkles, a new tool call per update: %w", err)
	}
	p := pair{name: "durable events/s, " + plural(n, "producer"), unit: "events/s", sparkles: s.rate, mercure: m.rate, higher: true,
		cond: fmt.Sprintf("%s, each with its own sandbox or topic and an SSE subscriber on it that counts; events of %d bytes of data; counted over %s once every subscriber had its first",
			plural(n, "producer"), size, d),
		sCond: fmt.Sprintf("an ACP agent process per sandbox floods tool_call updates during a turn as fast as its stdout pipe takes them: translation, group commit, fsync, SSE (%.0f events)", float64(s.window)),
		mCond: fmt.Sprintf("a publisher per topic POSTs each update and waits for its 200, which answers after the bolt commit (%.0f events, %.0f acknowledged)", float64(m.window), float64(m.acked)),
	}
	if target {
		p.target = 20
	}
	r.addPair(p)
	r.addPair(pair{name: "durable events/s, " + plural(n, "producer") + ", a new tool call per update", unit: "events/s",
		sparkles: fresh.rate, mercure: m.rate, higher: true, mercureShown: true,
		cond: fmt.Sprintf("as the figure above, against the same Mercure run, but each agent announces a new tool call with every update, each completed, "+
			"as a long autonomous turn does; counted over %s once the turns held %s tool calls in all (%s each): translation, group commit, fsync, SSE "+
			"(%.0f events of %d bytes of data)", d, thousands(warm), thousands(warm/int64(n)), float64(fresh.window), fresh.bytes/max(fresh.events, 1)),
	})
	return nil
}

// peerLongTurn is how many tool calls the turns of the peer scenario's
// agents that announce a new one with every update hold, in all, before
// their events are counted: one producer's turn is then as long as the
// turn whose cost grew with its length.
const peerLongTurn = 100000

type producersResult struct {
	rate          float64
	window, acked int64 // events counted in the window; publishes acknowledged in it
	events, bytes int64 // over the whole run, for the payload size
}

// sparklesProducers floods n sandboxes, each with an agent process; fresh
// makes every update a new tool call. The window starts once every
// subscriber has its first event and, with warm, warm/n events.
func sparklesProducers(ctx context.Context, r *runner, n int, d time.Duration, fresh bool, warm int64) (producersResult, error) {
	c, closeServer, err := r.child(ctx, EnvChildAgent+"=flood")
	if err != nil {
		return producersResult{}, err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: n})
	if err != nil {
		return producersResult{}, err
	}
	subs, err := subscribeAll(ctx, c.addr, c.token, created.IDs)
	if err != nil {
		return producersResult{}, err
	}
	defer closeAll(subs)
	r.logf("sparkles: %s flooding", plural(n, "agent"))
	op := "flood"
	if fresh {
		op = "floodnew"
	}
	if _, err := c.do(ctx, childRequest{Op: op, IDs: created.IDs}); err != nil {
		return producersResult{}, err
	}
	count := func() (sum int64) {
		for _, s := range subs {
			sum += s.count.Load()
		}
		return sum
	}
	for _, s := range subs {
		if err := s.waitFor(ctx, 1); err != nil {
			return producersResult{}, err
		}
		if err := waitEvents(ctx, s, warm/int64(n)); err != nil {
			return producersResult{}, err
		}
	}
	c0, t0 := count(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return producersResult{}, err
	}
	c1, t1 := count(), time.Now()
	// A window in which no commit landed (on a busy disk one fsync can
	// outlast a short window) ends with the next event instead: a rate
	// needs one.
	for c1 == c0 {
		if err := waitEvents(ctx, subs[0], subs[0].count.Load()+1); err != nil {
			return producersResult{}, err
		}
		c1, t1 = count(), time.Now()
	}
	if _, err := c.do(ctx, childRequest{Op: "unflood"}); err != nil {
		return producersResult{}, err
	}
	_, events, err := closeAll(subs)
	if err != nil {
		return producersResult{}, err
	}
	var bytes int64
	for _, s := range subs {
		bytes += s.bytes.Load()
	}
	return producersResult{rate: perSecond(c1-c0, t1.Sub(t0)), window: c1 - c0, events: events, bytes: bytes}, nil
}

func mercureProducers(ctx context.Context, r *runner, n int, d time.Duration, size int) (producersResult, error) {
	p, closePeer, err := r.peer(ctx)
	if err != nil {
		return producersResult{}, err
	}
	defer closePeer()
	topics := make([]string, n)
	for i := range topics {
		topics[i] = peerTopic(i)
	}
	subs, err := p.subscribeAll(ctx, topics)
	if err != nil {
		return producersResult{}, err
	}
	defer closeMercure(subs)
	r.logf("mercure: %s publishing", plural(n, "producer"))
	pub := p.publisher(n)
	defer pub.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		acked atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, topic := range topics {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := pub.publish(ctx, topic, stampedPayload(size)); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						first = errors.Join(first, err)
						mu.Unlock()
						cancel()
					}
					return
				}
				acked.Add(1)
			}
		})
	}
	stop := func() error {
		cancel()
		wg.Wait()
		return first
	}
	count := func() (sum int64) {
		for _, s := range subs {
			sum += s.count.Load()
		}
		return sum
	}
	for _, s := range subs {
		if err := s.waitCount(ctx, 1); err != nil {
			return producersResult{}, errors.Join(stop(), err)
		}
	}
	c0, a0, t0 := count(), acked.Load(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return producersResult{}, errors.Join(stop(), err)
	}
	c1, a1, t1 := count(), acked.Load(), time.Now()
	for c1 == c0 { // as Sparkles' window: it ends with an event
		if err := subs[0].waitCount(ctx, subs[0].count.Load()+1); err != nil {
			return producersResult{}, errors.Join(stop(), err)
		}
		c1, a1, t1 = count(), acked.Load(), time.Now()
	}
	if err := stop(); err != nil {
		return producersResult{}, err
	}
	return producersResult{rate: perSecond(c1-c0, t1.Sub(t0)), window: c1 - c0, acked: a1 - a0}, nil
}

// peerFanout measures one sandbox or topic streamed to many subscribers:
// one event at a time at a steady rate, each waiting for durability, and
// every subscriber reads every one. 20 events/s is one busy agent's
// coalesced output, 200 ten of them on one sandbox.
func peerFanout(ctx context.Context, r *runner, rate float64) error {
	n, d := pick(r, 1000, 20), pick(r, 10*time.Second, 500*time.Millisecond)
	s, err := sparklesFanout(ctx, r, n, d, rate)
	if err != nil {
		return fmt.Errorf("sparkles: %w", err)
	}
	size := int(s.bytes / max(s.deliveries, 1))
	m, err := mercureFanout(ctx, r, n, d, rate, size)
	if err != nil {
		return fmt.Errorf("mercure: %w", err)
	}
	cond := fmt.Sprintf("1 sandbox or topic, %d SSE subscribers, events of %d bytes of data appended or published one at a time at %.0f/s for %s, "+
		"each waiting for durability; until the last subscriber read the last event", n, size, rate, d)
	at := fmt.Sprintf(" at %.0f events/s x %d subscribers", rate, n)
	r.addPair(pair{name: "fan-out deliveries/s" + at, unit: "deliveries/s", sparkles: s.rate, mercure: m.rate, higher: true, cond: cond,
		sCond: fmt.Sprintf("%d events (%.0f/s achieved) appended by a loader inside the server, as the agent runtime appends", s.events, float64(s.events)/d.Seconds()),
		mCond: fmt.Sprintf("%d events (%.0f/s achieved) published by one client, each waiting for its 200", m.events, float64(m.events)/d.Seconds())})
	r.addPair(pair{name: "fan-out latency p99" + at, unit: "ms", sparkles: ms(s.hist.quantile(0.99)), mercure: ms(m.hist.quantile(0.99)),
		cond:  "from the publisher's timestamp in the payload, taken before the append or the POST, to the frame parsed by the subscriber",
		sCond: fmt.Sprintf("p50 %.2f ms, %d samples", ms(s.hist.quantile(0.5)), s.hist.n),
		mCond: fmt.Sprintf("p50 %.2f ms, %d samples", ms(m.hist.quantile(0.5)), m.hist.n)})
	return nil
}

type fanoutResult struct {
	rate               float64
	hist               histogram
	events, deliveries int64
	bytes              int64
}

func sparklesFanout(ctx context.Context, r *runner, n int, d time.Duration, rate float64) (fanoutResult, error) {
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return fanoutResult{}, err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: 1})
	if err != nil {
		return fanoutResult{}, err
	}
	r.logf("sparkles: %d subscribers of one sandbox", n)
	subs, err := subscribeAll(ctx, c.addr, c.token, slices.Repeat(created.IDs, n))
	if err != nil {
		return fanoutResult{}, err
	}
	defer closeAll(subs)
	start := time.Now()
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: created.IDs, Rate: rate, Size: eventSize}); err != nil {
		return fanoutResult{}, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return fanoutResult{}, err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	if err != nil {
		return fanoutResult{}, err
	}
	if err := waitAll(ctx, subs, slices.Repeat(end.Lasts, n)); err != nil {
		return fanoutResult{}, err
	}
	elapsed := time.Since(start)
	var bytes int64
	for _, s := range subs {
		bytes += s.bytes.Load()
	}
	h, deliveries, err := closeAll(subs)
	if err != nil {
		return fanoutResult{}, err
	}
	if want := end.Appended * int64(n); deliveries != want {
		return fanoutResult{}, fmt.Errorf("%d deliveries, want %d (%d events to %d subscribers)", deliveries, want, end.Appended, n)
	}
	return fanoutResult{rate: perSecond(deliveries, elapsed), hist: h, events: end.Appended, deliveries: deliveries, bytes: bytes}, nil
}

func mercureFanout(ctx context.Context, r *runner, n int, d time.Duration, rate float64, size int) (fanoutResult, error) {
	p, closePeer, err := r.peer(ctx)
	if err != nil {
		return fanoutResult{}, err
	}
	defer closePeer()
	r.logf("mercure: %d subscribers of one topic", n)
	subs, err := p.subscribeAll(ctx, slices.Repeat([]string{peerTopic(0)}, n))
	if err != nil {
		return fanoutResult{}, err
	}
	defer closeMercure(subs)
	pub := p.publisher(1)
	defer pub.close()
	start := time.Now()
	deadline := start.Add(d)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var published int64
	for {
		select {
		case <-ctx.Done():
			return fanoutResult{}, ctx.Err()
		case now := <-tick.C:
			if now.After(deadline) {
				goto done
			}
		}
		if _, err := pub.publish(ctx, peerTopic(0), stampedPayload(size)); err != nil {
			return fanoutResult{}, err
		}
		published++
	}
done:
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, s := range subs {
		if err := s.waitCount(wctx, published); err != nil {
			return fanoutResult{}, err
		}
	}
	elapsed := time.Since(start)
	h, deliveries, err := closeMercure(subs)
	if err != nil {
		return fanoutResult{}, err
	}
	if want := published * int64(n); deliveries != want {
		return fanoutResult{}, fmt.Errorf("%d deliveries, want %d (%d events to %d subscribers)", deliveries, want, published, n)
	}
	return fanoutResult{rate: perSecond(deliveries, elapsed), hist: h, events: published, deliveries: deliveries}, nil
}

// peerIdle measures what an idle SSE connection costs each server: its
// process's RSS before and after, each read after a GC that returns freed
// memory to the OS.
func peerIdle(ctx context.Context, r *runner) error {
	n, topics := pick(r, 5000, 200), pick(r, 100, 10)
	s, err := sparklesIdle(ctx, r, n, topics)
	if err != nil {
		return fmt.Errorf("sparkles: %w", err)
	}
	m, err := mercureIdle(ctx, r, n, topics)
	if err != nil {
		return fmt.Errorf("mercure: %w", err)
	}
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) / 1024 }
	r.addPair(pair{name: fmt.Sprintf("RSS per idle SSE connection at %d", n), unit: "KiB",
		sparkles: per(s[1].RSS, s[0].RSS), mercure: per(m[1].RSS, m[0].RSS),
		cond:  fmt.Sprintf("%d streams over %d sandboxes or topics, each past its first response bytes, no events; the server process's VmRSS before and after, each after a GC", n, topics),
		sCond: fmt.Sprintf("VmRSS %.1f -> %.1f MiB", mib(s[0].RSS), mib(s[1].RSS)),
		mCond: fmt.Sprintf("VmRSS %.1f -> %.1f MiB", mib(m[0].RSS), mib(m[1].RSS))})
	return nil
}

func sparklesIdle(ctx context.Context, r *runner, n, sandboxes int) ([2]procMem, error) {
	var mem [2]procMem
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return mem, err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: sandboxes})
	if err != nil {
		return mem, err
	}
	if mem[0], _, err = settledMem(ctx, c); err != nil {
		return mem, err
	}
	r.logf("sparkles: opening %d streams", n)
	closeStreams, err := openStreams(ctx, n, func(ctx context.Context, i int) (*stream, error) {
		return openStream(ctx, c.addr, c.token, created.IDs[i%len(created.IDs)], -1, 4<<10)
	})
	defer closeStreams()
	if err != nil {
		return mem, err
	}
	after, rep, err := settledMem(ctx, c)
	if err != nil {
		return mem, err
	}
	if rep.Streams != int64(n) {
		return mem, fmt.Errorf("the server counts %d open streams, want %d", rep.Streams, n)
	}
	mem[1] = after
	return mem, nil
}

func mercureIdle(ctx context.Context, r *runner, n, topics int) ([2]procMem, error) {
	var mem [2]procMem
	p, closePeer, err := r.peer(ctx)
	if err != nil {
		return mem, err
	}
	defer closePeer()
	if mem[0], err = p.settledMem(ctx); err != nil {
		return mem, err
	}
	r.logf("mercure: opening %d streams", n)
	closeStreams, err := openStreams(ctx, n, func(ctx context.Context, i int) (*stream, error) {
		return openMercure(ctx, p.addr, peerTopic(i%topics), "", 4<<10)
	})
	defer closeStreams()
	if err != nil {
		return mem, err
	}
	mem[1], err = p.settledMem(ctx)
	return mem, err
}

// openStreams opens n idle streams with open, 64 at a time, and returns
// what closes those it opened, also after an error.
func openStreams(ctx context.Context, n int, open func(ctx context.Context, i int) (*stream, error)) (closeAll func(), err error) {
	streams := make([]*stream, n)
	closeAll = func() {
		for _, s := range streams {
			if s != nil {
				s.Close()
			}
		}
	}
	err = parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		var err error
		streams[i], err = open(ctx, i)
		return err
	})
	return closeAll, err
}
