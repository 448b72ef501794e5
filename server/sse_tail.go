package server

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The newest events of a sandbox are read once for all the streams that
// follow it, not once per stream. A commit used to wake every stream of
// its sandbox, and each took the store's head and read the new events
// itself: for 1,000 subscribers, 1,000 reads under the store's one lock
// per commit. Now each sandbox with streams has a tail, a view of its
// newest events that every stream writes from. A view holds the store's
// wait channel, taken before the view was read. A tail with one stream
// has no goroutine: when the channel closes the stream reads the next
// view itself. Once a second stream joins, the tail gets a reader, a
// goroutine that waits on the channel, reads the next view once and
// closes the old view's done, which wakes every stream; it stays until
// the last stream leaves. The store's channel then has one waiter, so a
// commit wakes one goroutine per tail rather than every stream of it
// inside the store's lock. A tail holds the last tailMax events
// (tailBytes at most); a stream further behind reads from the store, a
// page at a time, until it is within it.
//
// With 1,000 subscribers of one sandbox at 200 events/s (sparkles bench,
// fanout, server in a child process) the server's CPU per delivery went
// from 7.1-7.3 to 6.4-6.5 µs and the p99 from 82-85 to 71-73 ms; with the
// client in the server's process, from 210-247 to 147-151 ms. At 20
// events/s nothing moved (p99 28-31 ms). What a delivery costs now is the
// stream's wake-up and its write, a loopback TCP write that is most of the
// server's profile. Refreshing a busy tail at most every 20 µs per stream,
// so that several commits share a view and a write, was tried: the streams
// already catch up several events per write once a fan-out takes longer
// than the commits come (3.8 events a write without it, 4.0 with it), so
// it went. So did a reader that, before it read the next view, waited (10
// or 25 ms at most) until all but a sixty-fourth of the streams it had
// woken had caught up: at 200 events/s the p99 was about 8 ms lower and
// the p50 3 ms higher, within the spread of six alternating runs, at the
// same 3.1-3.5 events per write, since the streams already write about
// once per round. Every tail first had its reader: for the product's load,
// 1,000 sandboxes with one stream each, that was a goroutine more per
// sandbox and a second wake-up per event. Without it the server's CPU per
// event stayed the same (sparkles bench, latency, --profile), and the p99
// was lower in nine of eleven alternating runs (median 108 against 116 ms,
// server in a child process).
//
// Events compacted away while in the tail may still be delivered from it:
// compaction only drops superseded events, and replay from any cursor
// ends in the same state either way (docs/retention.md). A prune is honoured at the
// next refresh, which drops the tail's events up to the new
// pruned_through, so a stream behind it reads the store and gets
// cursor_pruned.
const (
	tailMax   = replayBatch
	tailBytes = 4 << 20
)

// tails are the tails of the sandboxes that have streams.
type tails struct {
	mu sync.Mutex
	m  map[string]*tail
}

// tail is the shared tail of one sandbox.
type tail struct {
	st   Store
	id   string
	refs int // streams that hold it, under tails.mu; it is in tails.m while there are any
	view atomic.Pointer[tailView]
	// shared is set, and the reader started, when a second stream joins;
	// quit is closed when the last one leaves.
	shared atomic.Bool
	quit   chan struct{}
}

// tailView is what a tail holds at one moment; it never changes but for
// reading, which one goroutine claims. Its events are every retained
// event with base < id <= last, as they were when the view was read,
// with the head then. wake was taken before they were read; once it
// closes, the goroutine that claims reading (the tail's reader, or its
// one stream) reads the next view, puts it in the tail and closes done.
type tailView struct {
	wake       <-chan struct{}
	reading    atomic.Bool
	done       chan struct{}
	head       sandbox.Head
	base, last uint64
	recs       []sandbox.Record
	bytes      int
	err        error // the sandbox is gone (Head failed): the tail ends here
}

// after returns the view's events with id > cursor; the caller must not
// change them.
func (v *tailView) after(cursor uint64) []sandbox.Record {
	i := sort.Search(len(v.recs), func(i int) bool { return v.recs[i].ID > cursor })
	return v.recs[i:]
}

// join returns the tail of sandbox id for a new stream, which must leave
// it when it ends. A new tail starts empty at the head: its first streams
// read from the store up to it.
func (ts *tails) join(st Store, id string) *tail {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = make(map[string]*tail)
	}
	t := ts.m[id]
	if t == nil {
		t = &tail{st: st, id: id, quit: make(chan struct{})}
		t.view.Store(t.next(nil))
		ts.m[id] = t
	}
	if t.refs++; t.refs == 2 && !t.shared.Load() {
		t.shared.Store(true)
		go t.read()
	}
	return t
}

func (ts *tails) leave(t *tail) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.refs--; t.refs == 0 {
		if ts.m[t.id] == t {
			delete(ts.m, t.id)
		}
		close(t.quit)
	}
}

// read is the reader of a shared tail: it reads each view after the
// sandbox changes, until the last stream leaves or the sandbox is gone.
func (t *tail) read() {
	v := t.view.Load()
	for v.err == nil {
		select {
		case <-v.wake:
		case <-t.quit:
			return
		}
		v = t.after(v)
	}
}

// changed returns what a stream caught up with view v waits on: v's done
// on a shared tail, whose reader reads the next view; v's wake on a tail
// of its own, which it reads itself (after) once that closes.
func (t *tail) changed(v *tailView) <-chan struct{} {
	if t.shared.Load() {
		return v.done
	}
	return v.wake
}

// after returns the view that follows v, once v's wake has closed: the
// one in the tail if it has been read, else the one the caller reads, or
// waits for while another goroutine reads it.
func (t *tail) after(v *tailView) *tailView {
	if cur := t.view.Load(); cur != v {
		return cur
	}
	if !v.reading.CompareAndSwap(false, true) {
		<-v.done
		return t.view.Load()
	}
	next := t.next(v)
	t.view.Store(next)
	close(v.done)
	return next
}

// next reads the view that follows prev (nil for the first): the head,
// then the events published since prev, added to prev's and bounded to the
// last tailMax, less what a prune removed.
func (t *tail) next(prev *tailView) *tailView {
	v := &tailView{wake: t.st.Wait(t.id), done: make(chan struct{})}
	head, err := t.st.Head(t.id)
	if err != nil {
		v.err = err
		return v
	}
	v.head = head
	if prev == nil {
		v.base, v.last = head.LastEventID, head.LastEventID
		return v
	}
	v.base, v.last, v.recs, v.bytes = prev.base, prev.last, prev.recs, prev.bytes
	if head.LastEventID > v.last {
		after := v.last
		if head.LastEventID-after > tailMax {
			// More than the tail holds: its newest tailMax; the streams
			// that were at its end read the rest from the store.
			after = max(head.LastEventID-tailMax, head.PrunedThrough)
			v.base, v.recs, v.bytes = after, nil, 0
		}
		for after < head.LastEventID {
			// A short read, of what the store keeps in memory. The events
			// are appended past the end of prev's, which prev's readers
			// do not see.
			recs, err := t.st.Read(context.Background(), t.id, after, tailMax)
			if err != nil {
				// The streams behind get the error from the store.
				after = head.LastEventID
				v.base, v.recs, v.bytes = after, nil, 0
				break
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				v.bytes += len(r.JSON)
			}
			v.recs = append(v.recs, recs...)
			after = recs[len(recs)-1].ID
		}
		v.last = max(after, head.LastEventID)
	}
	// Never held beyond the tail's bounds or a prune's mark.
	n := 0
	for n < len(v.recs) && (len(v.recs)-n > tailMax || v.bytes > tailBytes || v.recs[n].ID <= head.PrunedThrough) {
		v.bytes -= len(v.recs[n].JSON)
		v.base = max(v.base, v.recs[n].ID)
		n++
	}
	v.recs = v.recs[n:]
	v.base = max(v.base, head.PrunedThrough)
	return v
}
