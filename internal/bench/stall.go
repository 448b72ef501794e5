package bench

import (
	"context"
	"fmt"
	"net"
	"time"
)

// runStall measures what a reader that never reads costs the server while
// others stream: the server (a child process) appends at a steady rate to a
// few sandboxes and a subscriber per sandbox reads everything. After a
// warm-up comes a control period as long as the stall, then one more
// connection asks for one of the logs from since=0 and reads nothing. The
// figure is the growth of the server's anonymous memory over the stall,
// each end measured after a collection, beside the same over the control
// period, so neither the heap's sawtooth nor what the server comes to hold
// anyway counts as the stalled reader's.
func runStall(ctx context.Context, r *runner) error {
	sandboxes, rate, size := 10, pick(r, 1000.0, 200.0), 1024
	// Together the logs start longer than the store's WAL holds in memory
	// (8 MiB) before it moves them into the file, so what the store holds
	// of them has reached its bound before anything is measured.
	prefill := pick(r, 2000, 200)
	warm, d := pick(r, 10*time.Second, time.Second), pick(r, time.Minute, 2*time.Second)
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: sandboxes, Fill: prefill, Size: size})
	if err != nil {
		return err
	}
	ids := created.IDs
	subs := make([]*subscriber, 0, len(ids))
	defer func() { closeAll(subs) }()
	for _, id := range ids {
		sub, err := subscribe(ctx, c.addr, c.token, id, -1)
		if err != nil {
			return err
		}
		subs = append(subs, sub)
	}
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: ids, Rate: rate, Size: size}); err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			c.do(context.Background(), childRequest{Op: "stop"})
		}
	}()

	r.logf("warming up for %s, then a control period of %s", warm, d)
	if err := sleepCtx(ctx, warm); err != nil {
		return err
	}
	// Each period ends with a collection that returns freed memory to the
	// OS, so what is compared is what the server holds, not garbage.
	base, _, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	controlPeak, err := peakMem(ctx, c, d, subs)
	if err != nil {
		return err
	}
	control, controlGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}

	r.logf("stalling one reader for %s", d)
	stalled, err := stallReader(ctx, c.addr, c.token, ids[0], 0)
	if err != nil {
		return err
	}
	defer stalled.Close()
	delivered0 := delivered(subs)
	start := time.Now()
	// Halfway through, the stalled stream is surely still open (the server
	// gives up on a write only after WriteTimeout); what it holds is
	// measured then as well as at the end, when it may have been dropped.
	peak1, err := peakMem(ctx, c, d/2, subs)
	if err != nil {
		return err
	}
	mid, midGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	peak2, err := peakMem(ctx, c, d-d/2, subs)
	if err != nil {
		return err
	}
	peak := procMem{RSS: max(peak1.RSS, peak2.RSS), Anon: max(peak1.Anon, peak2.Anon)}
	elapsed := time.Since(start)
	n := delivered(subs) - delivered0
	after, afterGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	if err := r.serverProfile(ctx, c); err != nil {
		return err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	stopped = true
	if err != nil {
		return err
	}
	// The subscribers, and the stalled reader unless the server gave up on
	// it (a write that makes no progress for a minute ends the stream).
	openMid, openEnd := midGo.Streams > int64(len(subs)), end.Streams > int64(len(subs))
	if mid.Anon > after.Anon {
		after, afterGo = mid, midGo
	}

	load := fmt.Sprintf("%.0f events/s of %d-byte text over %d sandboxes (%d events each beforehand), %d subscribers reading",
		rate, size, sandboxes, prefill, len(subs))
	growth := mib(after.Anon - control.Anon)
	r.add(Figure{Name: "server memory growth", Value: growth, Unit: "MiB",
		Conditions: fmt.Sprintf("%s, 1 reader of since=0 reading nothing for %s (connected halfway: %v, at the end: %v); "+
			"RssAnon after a GC, the larger of halfway and the end, minus the same after an equal control period before the stall (%.1f -> %.1f MiB)",
			load, d, openMid, openEnd, mib(control.Anon), mib(after.Anon)),
		Target: "< 10 MiB", Met: below(growth, 10)})
	r.add(Figure{Name: "control: growth without the stall", Value: mib(control.Anon - base.Anon), Unit: "MiB",
		Conditions: fmt.Sprintf("%s for %s; RssAnon after it minus after the %s warm-up, each after a GC (%.1f -> %.1f MiB)",
			load, d, warm, mib(base.Anon), mib(control.Anon))})
	r.add(Figure{Name: "Go heap growth during the stall", Value: mib(int64(afterGo.HeapInuse) - int64(controlGo.HeapInuse)), Unit: "MiB",
		Conditions: fmt.Sprintf("heap in use after a GC, at the same point, %.1f -> %.1f MiB", mib(int64(controlGo.HeapInuse)), mib(int64(afterGo.HeapInuse)))})
	r.add(Figure{Name: "peak RssAnon growth during the stall", Value: mib(peak.Anon - controlPeak.Anon), Unit: "MiB",
		Conditions: fmt.Sprintf("peak sampled every 250ms, %.1f in the control period -> %.1f MiB; garbage included, so it can be negative",
			mib(controlPeak.Anon), mib(peak.Anon))})
	r.add(Figure{Name: "server VmRSS growth", Value: mib(after.RSS - control.RSS), Unit: "MiB",
		Conditions: fmt.Sprintf("VmRSS %.1f -> %.1f MiB; includes bbolt's file mapping, which grows with the log", mib(control.RSS), mib(after.RSS))})
	r.add(Figure{Name: "others' deliveries during the stall", Value: perSecond(n, elapsed), Unit: "events/s",
		Conditions: fmt.Sprintf("the %d reading subscribers, offered %.0f events/s", len(subs), rate)})
	return nil
}

func delivered(subs []*subscriber) int64 {
	var n int64
	for _, s := range subs {
		n += s.count.Load()
	}
	return n
}

// peakMem samples the child's memory for d and returns the peak of each
// figure. It fails early if a subscriber's stream ends.
func peakMem(ctx context.Context, c *child, d time.Duration, subs []*subscriber) (procMem, error) {
	var peak procMem
	tick := time.NewTicker(min(250*time.Millisecond, d/4))
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for {
		m, err := c.mem()
		if err != nil {
			return procMem{}, err
		}
		peak.RSS, peak.Anon = max(peak.RSS, m.RSS), max(peak.Anon, m.Anon)
		for _, s := range subs {
			select {
			case <-s.done:
				return procMem{}, fmt.Errorf("a subscriber's stream ended: %v", s.err)
			default:
			}
		}
		select {
		case <-end.C:
			return peak, nil
		case <-ctx.Done():
			return procMem{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// stallReader asks for a stream (after since, or without a cursor when
// since is negative) and never reads a byte of the answer: the server's
// writes fill the socket buffers and then block.
func stallReader(ctx context.Context, addr, token, id string, since int64) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(streamRequest(addr, token, id, since)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
