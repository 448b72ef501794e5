package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// runFanout measures one sandbox streamed to many subscribers: events are
// appended one at a time at a steady rate, and every subscriber reads every
// one of them. It runs twice: with the server in this process, as the
// other scenarios do, and with the server in a child process, where the
// client's thousand goroutines do not share the server's Go scheduler.
func runFanout(ctx context.Context, r *runner) error {
	if err := fanoutLocal(ctx, r); err != nil {
		return err
	}
	return fanoutChild(ctx, r)
}

func fanoutLocal(ctx context.Context, r *runner) error {
	l, closeServer, err := r.local()
	if err != nil {
		return err
	}
	defer closeServer()

	n, rate, d := pick(r, 1000, 20), pick(r, 200.0, 50.0), pick(r, 10*time.Second, 500*time.Millisecond)
	ids, err := createSandboxes(ctx, l.coord, 1)
	if err != nil {
		return err
	}
	r.logf("opening %d streams", n)
	subs, err := subscribeAll(ctx, l.addr, l.token, slices.Repeat(ids, n))
	if err != nil {
		return err
	}
	start := time.Now()
	lasts, appended, _, err := paced(ctx, l, ids, rate, d)
	if err != nil {
		closeAll(subs)
		return err
	}
	if err := waitAll(ctx, subs, slices.Repeat(lasts, n)); err != nil {
		closeAll(subs)
		return err
	}
	elapsed := time.Since(start)
	h, deliveries, err := closeAll(subs)
	if err != nil {
		return err
	}
	if want := appended * int64(n); deliveries != want {
		return fmt.Errorf("%d deliveries, want %d (%d events to %d subscribers)", deliveries, want, appended, n)
	}
	cond := fmt.Sprintf("1 sandbox, %d subscribers, %d events appended one at a time at %.0f/s offered (%.0f deliveries/s offered) for %s",
		n, appended, rate, rate*float64(n), d)
	value := perSecond(deliveries, elapsed)
	r.add(Figure{Name: "deliveries/s", Value: value, Unit: "deliveries/s", Conditions: cond + "; until the last subscriber read the last event",
		Target: ">= 100,000", Met: atLeast(value, 100000)})
	latencyFigures(r, "fan-out", &h, 0, cond)
	return nil
}

func fanoutChild(ctx context.Context, r *runner) error {
	n, rate, d := pick(r, 1000, 20), pick(r, 200.0, 50.0), pick(r, 10*time.Second, 500*time.Millisecond)
	c, closeServer, err := r.child(ctx)
	if err != nil {
		return err
	}
	defer closeServer()
	created, err := c.do(ctx, childRequest{Op: "create", N: 1})
	if err != nil {
		return err
	}
	r.logf("opening %d streams to a child server", n)
	subs, err := subscribeAll(ctx, c.addr, c.token, slices.Repeat(created.IDs, n))
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: created.IDs, Rate: rate, Size: eventSize}); err != nil {
		closeAll(subs)
		return err
	}
	if err := sleepCtx(ctx, d); err != nil {
		closeAll(subs)
		return err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	if err != nil {
		closeAll(subs)
		return err
	}
	if err := waitAll(ctx, subs, slices.Repeat(end.Lasts, n)); err != nil {
		closeAll(subs)
		return err
	}
	elapsed := time.Since(start)
	h, deliveries, err := closeAll(subs)
	if err != nil {
		return err
	}
	if want := end.Appended * int64(n); deliveries != want {
		return fmt.Errorf("child server: %d deliveries, want %d (%d events to %d subscribers)", deliveries, want, end.Appended, n)
	}
	cond := fmt.Sprintf("as above with the server in a child process: %d subscribers, %d events at %.0f/s offered for %s",
		n, end.Appended, rate, d)
	value := perSecond(deliveries, elapsed)
	r.add(Figure{Name: "deliveries/s, child server", Value: value, Unit: "deliveries/s", Conditions: cond,
		Target: ">= 100,000", Met: atLeast(value, 100000)})
	latencyFigures(r, "fan-out, child server", &h, 0, cond)
	return nil
}
