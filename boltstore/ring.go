package boltstore

import (
	"sort"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// ring keeps the most recent records of one sandbox so that streams at the
// tail read from memory. It holds every retained record with an id >= from,
// in id order; older records are read from the file.
type ring struct {
	buf   []sandbox.Record // grows up to the cache size, then wraps
	start int              // index of the oldest record once buf wraps
	n     int
	from  uint64
}

func (r *ring) at(i int) *sandbox.Record { return &r.buf[(r.start+i)%len(r.buf)] }

// push appends a record newer than any held, evicting the oldest when the
// ring holds size records.
func (r *ring) push(rec sandbox.Record, size int) {
	// Until buf reaches size it has not wrapped: start is 0 and n is len(buf).
	if len(r.buf) < size {
		r.buf = append(r.buf, rec)
		r.n++
		return
	}
	old := r.at(0)
	r.from = max(r.from, old.ID+1)
	*old = rec
	r.start = (r.start + 1) % len(r.buf)
}

// covers reports whether every retained record with id > after is held.
func (r *ring) covers(after uint64) bool { return after+1 >= r.from }

// read copies up to limit records with id > after.
func (r *ring) read(after uint64, limit int) []sandbox.Record {
	i := sort.Search(r.n, func(i int) bool { return r.at(i).ID > after })
	out := make([]sandbox.Record, 0, min(limit, r.n-i))
	for ; i < r.n && len(out) < limit; i++ {
		out = append(out, *r.at(i))
	}
	return out
}

// remove drops the records for which gone returns true, keeping the order.
// The ring still holds every retained record >= from, since the removed ones
// are no longer retained.
func (r *ring) remove(gone func(id uint64) bool) {
	kept := make([]sandbox.Record, 0, r.n)
	for i := 0; i < r.n; i++ {
		if rec := r.at(i); !gone(rec.ID) {
			kept = append(kept, *rec)
		}
	}
	r.buf, r.start, r.n = kept, 0, len(kept)
}
