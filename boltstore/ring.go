package boltstore

import (
	"sort"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// ringMaxBytes bounds the envelope bytes one sandbox's ring holds, beside
// its count limit: a message.updated can carry up to a MiB of text, and a
// thousand of them must not pin a GiB. A stream further behind reads the
// file instead.
const ringMaxBytes = 8 << 20

// defaultCacheBytes bounds the bytes every ring holds together. Without a
// bound across sandboxes, a server that had written 1,000 events into each
// of 2,000 sandboxes held all of them in memory, 1.3 GB of Go heap: a
// running server's memory grew with its file (see doc.go).
const defaultCacheBytes = 64 << 20

// ring keeps the most recent records of one sandbox so that streams at the
// tail read from memory. It holds every retained record with an id >= from,
// in id order; older records are read from the file. It is a queue over a
// slice: buf[head:] are the records held.
type ring struct {
	buf   []sandbox.Record
	head  int
	bytes int
	from  uint64
}

func (r *ring) held() []sandbox.Record { return r.buf[r.head:] }

// push appends a record newer than any held, evicting the oldest while the
// ring holds more than size records or more than ringMaxBytes (the newest
// record always stays).
func (r *ring) push(rec sandbox.Record, size int) {
	r.buf = append(r.buf, rec)
	r.bytes += len(rec.JSON)
	for n := len(r.buf) - r.head; n > 1 && (n > size || r.bytes > ringMaxBytes); n-- {
		old := &r.buf[r.head]
		r.from = max(r.from, old.ID+1)
		r.bytes -= len(old.JSON)
		*old = sandbox.Record{} // let the evicted bytes go
		r.head++
	}
	// Move the held records to the front once the evicted ones dominate,
	// so the slice does not grow without end; amortized O(1) per push.
	if r.head > 64 && r.head > len(r.buf)/2 {
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf, r.head = r.buf[:n], 0
	}
}

// covers reports whether every retained record with id > after is held.
func (r *ring) covers(after uint64) bool { return after+1 >= r.from }

// read copies up to limit records with id > after.
func (r *ring) read(after uint64, limit int) []sandbox.Record {
	h := r.held()
	i := sort.Search(len(h), func(i int) bool { return h[i].ID > after })
	out := make([]sandbox.Record, 0, min(limit, len(h)-i))
	return append(out, h[i:min(len(h), i+limit)]...)
}

// remove drops the records for which gone returns true, keeping the order,
// in place (readers copy what they read under the same lock). The ring
// still holds every retained record >= from, since the removed ones are no
// longer retained.
func (r *ring) remove(gone func(id uint64) bool) {
	h := r.held()
	n := 0
	r.bytes = 0
	for _, rec := range h {
		if !gone(rec.ID) {
			h[n] = rec
			n++
			r.bytes += len(rec.JSON)
		}
	}
	clear(h[n:]) // let the removed bytes go
	r.buf = r.buf[:r.head+n]
}

// drop lets every held record go. The ring then holds none and reads of
// what it held go to the file; it holds records again from the next push.
func (r *ring) drop() {
	if h := r.held(); len(h) > 0 {
		r.from = max(r.from, h[len(h)-1].ID+1)
	}
	r.buf, r.head, r.bytes = nil, 0, 0
}

// cache bounds the bytes the rings of all sandboxes hold together. It keeps
// the sandboxes whose rings hold records in the order they were last
// written, and empties the rings of those written least recently first:
// their streams are the least likely to be at the tail, and a stream that
// is behind reads the file as it would past its ring's end. The store's
// lock is held, alone, by every caller.
type cache struct {
	maxBytes int
	bytes    int    // what the rings of the list hold
	newest   *entry // the list: newest, then each one's older, to oldest
	oldest   *entry
}

// written accounts for a write to e's ring, which held held bytes before
// it, and makes e the newest.
func (c *cache) written(e *entry, held int) {
	c.bytes += e.ring.bytes - held
	c.unlink(e)
	if e.ring.bytes == 0 {
		return
	}
	e.older = c.newest
	if c.newest != nil {
		c.newest.newer = e
	}
	c.newest = e
	if c.oldest == nil {
		c.oldest = e
	}
}

// forget takes e, which is going away, out of the cache.
func (c *cache) forget(e *entry) {
	c.bytes -= e.ring.bytes
	c.unlink(e)
}

// trim empties the rings written least recently until the rest fit, always
// keeping the newest.
func (c *cache) trim() {
	for c.bytes > c.maxBytes && c.oldest != nil && c.oldest != c.newest {
		e := c.oldest
		c.bytes -= e.ring.bytes
		e.ring.drop()
		c.unlink(e)
	}
}

func (c *cache) unlink(e *entry) {
	if e.newer == nil && e.older == nil && c.newest != e {
		return // not in the list
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		c.newest = e.older
	}
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		c.oldest = e.newer
	}
	e.newer, e.older = nil, nil
}
