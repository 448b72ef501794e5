package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// subscriber reads one stream on a goroutine of its own and records the
// latency of every stamped event: from the stamp taken just before
// AppendEvents to the moment the frame is parsed here.
type subscriber struct {
	s       *stream
	hist    histogram // the goroutine's until done is closed
	last    atomic.Uint64
	count   atomic.Int64
	bytes   atomic.Int64  // of the events' data
	signal  chan struct{} // poked after each event
	done    chan struct{}
	closing atomic.Bool
	err     error // why the stream ended, set before done is closed
}

func subscribe(ctx context.Context, addr, token, id string, since int64) (*subscriber, error) {
	s, err := openStream(ctx, addr, token, id, since, 16<<10)
	if err != nil {
		return nil, err
	}
	sub := &subscriber{s: s, signal: make(chan struct{}, 1), done: make(chan struct{})}
	go sub.run()
	return sub, nil
}

// subscribeAll opens one subscriber per entry of ids, width at a time.
func subscribeAll(ctx context.Context, addr, token string, ids []string) ([]*subscriber, error) {
	subs := make([]*subscriber, len(ids))
	err := parallel(ctx, len(ids), 32, func(ctx context.Context, i int) error {
		var err error
		subs[i], err = subscribe(ctx, addr, token, ids[i], -1)
		return err
	})
	if err != nil {
		closeAll(subs)
		return nil, err
	}
	return subs, nil
}

func (sub *subscriber) run() {
	defer close(sub.done)
	for {
		f, err := sub.s.next()
		if err != nil {
			if !sub.closing.Load() {
				sub.err = err
			}
			return
		}
		if f.id == 0 {
			continue // a status frame
		}
		if at, ok := stampOf(f.data); ok {
			sub.hist.record(time.Duration(time.Now().UnixNano() - at))
		}
		sub.last.Store(f.id)
		sub.bytes.Add(int64(len(f.data)))
		sub.count.Add(1)
		select {
		case sub.signal <- struct{}{}:
		default:
		}
	}
}

// waitFor waits until the subscriber has read event id.
func (sub *subscriber) waitFor(ctx context.Context, id uint64) error {
	for sub.last.Load() < id {
		select {
		case <-sub.signal:
		case <-sub.done:
			if sub.last.Load() >= id {
				return nil
			}
			return fmt.Errorf("stream ended before event %d (last %d): %v", id, sub.last.Load(), sub.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for event %d (last %d): %w", id, sub.last.Load(), ctx.Err())
		}
	}
	return nil
}

// close ends the stream and returns why it had ended before, if it had.
func (sub *subscriber) close() error {
	sub.closing.Store(true)
	sub.s.Close()
	<-sub.done
	return sub.err
}

// closeAll closes every subscriber and merges their histograms.
func closeAll(subs []*subscriber) (h histogram, deliveries int64, err error) {
	for _, sub := range subs {
		if sub == nil {
			continue
		}
		if e := sub.close(); e != nil && err == nil {
			err = e
		}
		h.merge(&sub.hist)
		deliveries += sub.count.Load()
	}
	return h, deliveries, err
}

// latencyFigures adds p50, p99 and p999 of h; p99 is held to target.
func latencyFigures(r *runner, what string, h *histogram, target time.Duration, cond string) {
	p50, p99, p999 := h.quantile(0.5), h.quantile(0.99), h.quantile(0.999)
	cond = fmt.Sprintf("%s; %d samples", cond, h.n)
	r.add(Figure{Name: what + " p50", Value: ms(p50), Unit: "ms", Conditions: cond})
	f := Figure{Name: what + " p99", Value: ms(p99), Unit: "ms", Conditions: cond}
	if target > 0 {
		f.Target, f.Met = fmt.Sprintf("< %s", target), below(ms(p99), ms(target))
	}
	r.add(f)
	r.add(Figure{Name: what + " p999", Value: ms(p999), Unit: "ms", Conditions: cond})
}
