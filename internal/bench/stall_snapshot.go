package bench

import (
	"context"
	"fmt"
	"net"
	"time"
)

// runStallSnapshot measures what readers that never read cost the server
// when the snapshot they are sent first is large: a sandbox whose running
// turn has 20,000 tool calls (about 6 MB of snapshot), and 300 connections
// that ask for its stream and read nothing, so each stream blocks writing
// its snapshot frame and holds whatever it writes from. The figure is the
// growth of the server's memory per connection once all are open, each
// end measured after a collection that returns freed memory to the OS.
// The same is measured with a snapshot a tenth the size: what a
// connection costs beyond the one encoding the streams share must not
// grow with the snapshot. The kernel's socket buffers are not the
// process's memory.
func runStallSnapshot(ctx context.Context, r *runner) error {
	conns, tools := pick(r, 300, 20), pick(r, 20000, 2000)
	if lim := raiseFileLimit(uint64(conns + 1024)); lim < uint64(conns+64) {
		return fmt.Errorf("the open-file limit is %d; %d connections need %d (ulimit -n)", lim, conns, conns+64)
	}
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return err
	}
	defer closeServer()
	for i, n := range []int{tools / 10, tools} {
		m, err := measureStalledSnapshots(ctx, r, c, conns, n)
		if err != nil {
			return err
		}
		per := func(a, b int64) float64 { return float64(a-b) / float64(conns) / 1024 }
		cond := fmt.Sprintf("%d connections that read nothing on one sandbox whose running turn has %d tool calls (a %.1f MiB snapshot frame); "+
			"server in a child process, after a GC that returns freed memory to the OS", conns, n, mib(m.snap))
		rss, beyond := per(m.after.RSS, m.before.RSS), per(m.after.RSS-m.snap, m.before.RSS)
		what := fmt.Sprintf(", %.1f MiB snapshot", mib(m.snap))
		f := Figure{Name: "RSS growth per stalled connection beyond the shared snapshot" + what, Value: beyond, Unit: "KiB",
			Conditions: fmt.Sprintf("%s; VmRSS %.1f -> %.1f MiB, less one snapshot frame", cond, mib(m.before.RSS), mib(m.after.RSS))}
		if i == 1 {
			f.Target, f.Met = "<= 64 KiB, whatever the snapshot's size", atLeast(64, beyond)
		}
		r.add(f)
		r.add(Figure{Name: "RSS growth per stalled connection" + what, Value: rss, Unit: "KiB",
			Conditions: fmt.Sprintf("%s; VmRSS %.1f -> %.1f MiB (%.1f MiB in all)", cond, mib(m.before.RSS), mib(m.after.RSS), mib(m.after.RSS-m.before.RSS))})
		r.add(Figure{Name: "Go heap growth per stalled connection beyond the shared snapshot" + what,
			Value: per(int64(m.afterGo.HeapInuse)-m.snap, int64(m.beforeGo.HeapInuse)), Unit: "KiB",
			Conditions: fmt.Sprintf("heap in use %.1f -> %.1f MiB, less one snapshot frame", mib(int64(m.beforeGo.HeapInuse)), mib(int64(m.afterGo.HeapInuse)))})
	}
	return nil
}

// stalledMem is the server's memory before and after the stalled
// connections of one measurement, and the snapshot's size.
type stalledMem struct {
	before, after     procMem
	beforeGo, afterGo childReply
	snap              int64
}

// measureStalledSnapshots makes a sandbox with a turn of tools tool calls
// on the child c, opens conns streams of it that read nothing, measures,
// and closes them again.
func measureStalledSnapshots(ctx context.Context, r *runner, c *child, conns, tools int) (stalledMem, error) {
	var m stalledMem
	r.logf("appending a turn of %d tool calls", tools)
	created, err := c.do(ctx, childRequest{Op: "tools", Fill: tools, Size: 180})
	if err != nil {
		return m, err
	}
	id := created.IDs[0]
	// One reader that reads: how large the snapshot frame is.
	if m.snap, err = snapshotSize(ctx, c.addr, c.token, id); err != nil {
		return m, err
	}
	if err := waitStreams(ctx, c, 0); err != nil {
		return m, err
	}
	if m.before, m.beforeGo, err = settledMem(ctx, c); err != nil {
		return m, err
	}

	r.logf("opening %d streams of a %.1f MiB snapshot that read nothing", conns, mib(m.snap))
	stalled := make([]net.Conn, 0, conns)
	defer func() {
		for _, conn := range stalled {
			conn.Close()
		}
	}()
	for range conns {
		conn, err := stallReader(ctx, c.addr, c.token, id, -1)
		if err != nil {
			return m, err
		}
		stalled = append(stalled, conn)
	}
	// A stream counts as open once its snapshot is encoded and its first
	// write is under way.
	if err := waitStreams(ctx, c, conns); err != nil {
		return m, err
	}
	if m.after, m.afterGo, err = settledMem(ctx, c); err != nil {
		return m, err
	}
	if err := r.serverProfile(ctx, c); err != nil {
		return m, err
	}
	if m.afterGo.Streams != int64(conns) {
		return m, fmt.Errorf("the server counts %d open streams at the end, want %d: some stalled stream was dropped", m.afterGo.Streams, conns)
	}
	for _, conn := range stalled {
		conn.Close()
	}
	stalled = nil
	return m, waitStreams(ctx, c, 0)
}

// snapshotSize reads the first frame of a stream of sandbox id and returns
// the size of its data.
func snapshotSize(ctx context.Context, addr, token, id string) (int64, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	s, err := startStream(ctx, conn, token, id, -1, 64<<10)
	if err != nil {
		return 0, err
	}
	return int64(len(s.data)), nil
}

// waitStreams waits until the child counts n open streams.
func waitStreams(ctx context.Context, c *child, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		rep, err := c.do(ctx, childRequest{Op: "mem"})
		if err != nil {
			return err
		}
		if rep.Streams == int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server counts %d open streams after a minute, want %d", rep.Streams, n)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
