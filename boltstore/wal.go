package boltstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The WAL's write side (see doc.go, The WAL and Materialization): the
// layout of its entries, how a commit writes them and a sandbox's tail
// keeps them, and how materializing moves them into the sandboxes' buckets
// and truncates the WAL.

// stored is a record with the value its events bucket keeps; rec.JSON is
// the tail of value, so a record costs its bytes once.
type stored struct {
	rec   sandbox.Record
	value []byte
}

// walTail is what of one sandbox only the WAL holds: published and durable,
// not yet in its buckets. Its records are the newest of the log: every id
// above the events bucket's last. The committer changes it under Store.mu.
type walTail struct {
	keys      []uint64 // its WAL entries, oldest first
	recs      []stored
	bytes     int
	turns     map[string]*sandbox.Turn
	approvals map[string]*sandbox.Approval
}

// walEntryVersion leads a WAL value that holds one entry, walBatchVersion
// one that holds several (a commit's entries under one key: one Put, and
// its bytes written as one run of pages). A later layout gets a new byte.
//
// walHeadVersion leads an entry whose state is a mutate's head with only
// the lists it changed (see encodeMutated): a byte of those lists follows
// the sandbox id. A version-1 entry's state carries every list.
const (
	walEntryVersion = 1
	walBatchVersion = 2
	walHeadVersion  = 3

	allLists = 0b111 // a bit for each of stateLists: messages, tools, approvals
)

// walEntry is one request's part of a commit, as the WAL keeps it: the
// sandbox, the state a mutate left (nil when none ran) with the lists it
// carries (a bit per stateLists entry; the others are the state's before
// the entry), and the records.
type walEntry struct {
	sandbox string
	state   []byte
	lists   byte
	recs    []walRecord
}

type walRecord struct {
	id    uint64
	value []byte
}

// appendWALHeader begins an entry: a version byte, then the
// uvarint-prefixed sandbox id, for walHeadVersion the byte of the lists
// the state carries, the uvarint-prefixed state, and the record count.
// Each record follows as its uvarint id and its uvarint-prefixed events
// bucket value.
func appendWALHeader(b []byte, sandboxID string, state []byte, lists byte, n int) []byte {
	head := state != nil && lists != allLists
	if head {
		b = append(b, walHeadVersion)
	} else {
		b = append(b, walEntryVersion)
	}
	b = binary.AppendUvarint(b, uint64(len(sandboxID)))
	b = append(b, sandboxID...)
	if head {
		b = append(b, lists)
	}
	b = binary.AppendUvarint(b, uint64(len(state)))
	b = append(b, state...)
	return binary.AppendUvarint(b, uint64(n))
}

var errBadWALEntry = errors.New("malformed WAL entry")

// decodeWALEntry decodes an entry. The slices it returns point into v.
func decodeWALEntry(v []byte) (walEntry, error) {
	var e walEntry
	if len(v) == 0 || (v[0] != walEntryVersion && v[0] != walHeadVersion) {
		return e, errBadWALEntry
	}
	d := walDecoder{b: v[1:]}
	e.sandbox = string(d.bytes())
	e.lists = allLists
	if v[0] == walHeadVersion {
		if d.err == nil && (len(d.b) == 0 || d.b[0] > allLists) {
			d.err = errBadWALEntry
		}
		if d.err == nil {
			e.lists, d.b = d.b[0], d.b[1:]
		}
	}
	e.state = d.bytes()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errBadWALEntry // each record takes at least a byte
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.uvarint()
		e.recs = append(e.recs, walRecord{id: id, value: d.bytes()})
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errBadWALEntry
	}
	if len(e.state) == 0 {
		e.state = nil
	}
	return e, d.err
}

// encodeWALValue makes the value of a commit's entries: the entry itself
// when there is one, else a batch: walBatchVersion, the uvarint count, and
// each entry uvarint-prefixed.
func encodeWALValue(entries [][]byte) []byte {
	if len(entries) == 1 {
		return entries[0]
	}
	size := 1 + binary.MaxVarintLen64
	for _, e := range entries {
		size += binary.MaxVarintLen64 + len(e)
	}
	b := append(make([]byte, 0, size), walBatchVersion)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b
}

// decodeWALValue decodes the entries of a WAL value, in commit order. The
// slices it returns point into v.
func decodeWALValue(v []byte) ([]walEntry, error) {
	if len(v) > 0 && (v[0] == walEntryVersion || v[0] == walHeadVersion) {
		e, err := decodeWALEntry(v)
		return []walEntry{e}, err
	}
	if len(v) == 0 || v[0] != walBatchVersion {
		return nil, errBadWALEntry
	}
	d := walDecoder{b: v[1:]}
	n := d.uvarint()
	if d.err == nil && (n == 0 || n > uint64(len(d.b))) {
		return nil, errBadWALEntry // each entry takes at least a byte
	}
	ents := make([]walEntry, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		b := d.bytes()
		if d.err != nil {
			break
		}
		e, err := decodeWALEntry(b)
		if err != nil {
			return nil, err
		}
		ents = append(ents, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errBadWALEntry
	}
	return ents, d.err
}

// eachWALEntry calls fn with every entry of the WAL, oldest first, with the
// key of the value that holds it.
func eachWALEntry(wal *bbolt.Bucket, fn func(key uint64, ent walEntry) error) error {
	c := wal.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ents, err := decodeWALValue(v)
		if err != nil {
			return fmt.Errorf("WAL entry %d: %w", keyID(k), err)
		}
		for _, ent := range ents {
			if err := fn(keyID(k), ent); err != nil {
				return err
			}
		}
	}
	return nil
}

type walDecoder struct {
	b   []byte
	err error
}

func (d *walDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadWALEntry
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *walDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadWALEntry
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// addWAL encodes the WAL entry of an append whose ids are assigned; flush
// writes it. The records' values are encoded in place in the entry, which
// they share from then on.
func (p *pending) addWAL(state []byte, lists byte, w *appendWrite) {
	size := 2 + 3*binary.MaxVarintLen64 + len(p.id) + len(state)
	for i := range w.events {
		size += 2*binary.MaxVarintLen64 + w.valueLen(i)
	}
	b := appendWALHeader(make([]byte, 0, size), p.id, state, lists, len(w.events))
	for i := range w.events {
		b = binary.AppendUvarint(b, w.ids[i])
		b = binary.AppendUvarint(b, uint64(w.valueLen(i)))
		start := len(b)
		b = w.appendValue(b, i)
		p.recs = append(p.recs, w.storedAt(i, b[start:len(b):len(b)]))
		p.walBytes += len(b) - start
	}
	p.entries = append(p.entries, b)
}

// putWAL writes the entries of the sandboxes in WAL mode under the next WAL
// keys, as few values as the value limit allows (a sandbox's entries of a
// commit stay in one value). The limit matters: bbolt rewrites the leaf a
// Put lands in, and the WAL's last leaf holds the previous commit's value,
// so a commit of one huge value wrote the one before it again.
func (t *txn) putWAL(ps []*pending) error {
	var (
		group   []*pending
		entries [][]byte
		size    int
	)
	put := func() error {
		if len(entries) == 0 {
			return nil
		}
		key, err := t.wal.NextSequence()
		if err != nil {
			return err
		}
		if err := t.wal.Put(idKey(key), encodeWALValue(entries)); err != nil {
			return err
		}
		for _, p := range group {
			p.walKeys = append(p.walKeys, key)
		}
		t.walPut++
		group, entries, size = group[:0], entries[:0], 0
		return nil
	}
	for _, p := range ps {
		if len(p.entries) == 0 {
			continue
		}
		n := 0
		for _, e := range p.entries {
			n += len(e)
		}
		if size > 0 && size+n > t.s.limits.valueMax {
			if err := put(); err != nil {
				return err
			}
		}
		group = append(group, p)
		entries = append(entries, p.entries...)
		size += n
	}
	return put()
}

// growTail adds what a transaction wrote to the WAL for p to its sandbox's
// tail. Called by publish, under mu.
func (s *Store) growTail(e *entry, p *pending) {
	w := e.wal
	if w == nil {
		w = &walTail{}
		e.wal = w
		s.tails[p.id] = e
	}
	w.keys = append(w.keys, p.walKeys...)
	w.recs = append(w.recs, p.recs...)
	w.bytes += p.walBytes
	s.walRecs += len(p.recs)
	s.walBytes += p.walBytes
	if len(p.turns) > 0 && w.turns == nil {
		w.turns = make(map[string]*sandbox.Turn)
	}
	maps.Copy(w.turns, p.turns)
	if len(p.approvals) > 0 && w.approvals == nil {
		w.approvals = make(map[string]*sandbox.Approval)
	}
	maps.Copy(w.approvals, p.approvals)
}

// dropTail forgets a sandbox's tail once its buckets hold it (or once the
// sandbox is gone). Called by publish, under mu.
func (s *Store) dropTail(e *entry, id string) {
	if w := e.wal; w != nil {
		s.walRecs -= len(w.recs)
		s.walBytes -= w.bytes
		e.wal = nil
		if s.tails[id] == e {
			delete(s.tails, id)
		}
	}
}

// tailKey is a sandbox with a WAL tail and the oldest WAL key it needs.
type tailKey struct {
	key uint64
	id  string
	wal *walTail
}

// materializeChunk materializes the sandboxes whose tails are the oldest, up
// to the chunk limits (at least one), in one transaction, and truncates the
// WAL up to the oldest entry some tail still needs.
func (s *Store) materializeChunk() error {
	err := s.update(func(t *txn) error {
		// The tails by their oldest WAL key; sorting pairs, not ids whose
		// keys are looked up in every comparison, which cost a chunk over
		// 1,000 tails a sixth of its CPU.
		oldest := make([]tailKey, 0, len(s.tails))
		for id, e := range s.tails {
			oldest = append(oldest, tailKey{e.wal.keys[0], id, e.wal})
		}
		slices.SortFunc(oldest, func(a, b tailKey) int { return cmp.Compare(a.key, b.key) })
		n, recs, size := 0, 0, 0
		for n < len(oldest) && (n == 0 || recs < s.limits.chunkRecords && size < s.limits.chunkBytes && n < s.limits.chunkSandboxes) {
			w := oldest[n].wal
			recs, size, n = recs+len(w.recs), size+w.bytes, n+1
		}
		for _, tk := range oldest[:n] {
			p, err := t.sandbox(tk.id)
			if err != nil {
				return err
			}
			if err := t.materialize(p); err != nil {
				return err
			}
		}
		floor := uint64(math.MaxUint64)
		if n < len(oldest) {
			floor = oldest[n].key
		}
		return t.truncate(floor)
	}, false)
	if err == nil {
		s.test.materialized()
	}
	return err
}

// materializeAll materializes every tail and empties the WAL.
func (s *Store) materializeAll() error {
	for len(s.tails) > 0 || s.walLen > 0 {
		before, recs := s.walLen, s.walRecs
		if err := s.materializeChunk(); err != nil {
			return err
		}
		if s.walLen == before && s.walRecs == recs && len(s.tails) == 0 {
			return fmt.Errorf("the WAL holds %d entries that truncation does not reach", s.walLen)
		}
	}
	return nil
}

// truncate deletes WAL entries with keys below floor, a bounded number per
// transaction. Every sandbox they concern holds them in its buckets (or is
// gone).
func (t *txn) truncate(floor uint64) error {
	var keys []uint64
	c := t.wal.Cursor()
	k, _ := c.First()
	for ; k != nil && len(keys) < t.s.limits.truncateBatch && keyID(k) < floor; k, _ = c.Next() {
		keys = append(keys, keyID(k))
	}
	for _, key := range keys {
		if err := t.wal.Delete(idKey(key)); err != nil {
			return err
		}
	}
	t.walDeleted += len(keys)
	t.walEmptied = k == nil // and the count kept in memory had better agree
	if len(keys) > 0 {
		t.dirty = true
	}
	return nil
}
