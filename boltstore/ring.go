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
