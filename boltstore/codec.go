package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Bucket and key names of the layout described in doc.go.
var (
	bucketSandboxes  = []byte("sandboxes")
	bucketWAL        = []byte("wal")
	bucketUnsettled  = []byte("unsettled")
	bucketEvents     = []byte("events")
	bucketTurns      = []byte("turns")
	bucketApprovals  = []byte("approvals")
	keyMeta          = []byte("meta")
	keyState         = []byte("state")
	keyConfig        = []byte("config")
	keyWALMark       = []byte("walmark")
	bucketStateItems = []byte("stateitems")
)

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), id) }

func keyID(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

// decodeRecord copies a stored value out of bbolt's memory, which is only
// valid inside the transaction.
func decodeRecord(k, v []byte) (sandbox.Record, error) {
	rec, err := viewRecord(k, v)
	rec.JSON = bytes.Clone(rec.JSON)
	return rec, err
}

// viewRecord decodes a stored value without copying it: its JSON is bbolt's
// memory, valid only inside the transaction. Known types are not allocated.
func viewRecord(k, v []byte) (sandbox.Record, error) {
	if len(v) < 1 || len(v) < 1+int(v[0]) {
		return sandbox.Record{}, fmt.Errorf("event %d: truncated record", keyID(k))
	}
	n := 1 + int(v[0])
	return sandbox.Record{ID: keyID(k), Type: internType(v[1:n]), JSON: v[n:]}, nil
}

// internType returns the durable Type spelled b; an unknown one is copied.
func internType(b []byte) sandbox.Type {
	for _, t := range sandbox.DurableTypes {
		if string(b) == string(t) { // compared without allocating
			return t
		}
	}
	return sandbox.Type(b)
}

// foldTime is the ts a reader of the log decodes: UTC, truncated to the
// millisecond like the envelope writes it. The state is folded with it so
// that it matches what a client folds from the same records.
func foldTime(ts time.Time) time.Time { return ts.UTC().Truncate(time.Millisecond) }

func sandboxBucket(tx *bbolt.Tx, id string) *bbolt.Bucket {
	root := tx.Bucket(bucketSandboxes)
	if root == nil || id == "" {
		return nil
	}
	return root.Bucket([]byte(id))
}

func readMeta(b *bbolt.Bucket, id string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	if err := json.Unmarshal(b.Get(keyMeta), &sb); err != nil {
		return sb, fmt.Errorf("sandbox %s: decode meta: %w", id, err)
	}
	sb.LastEventID = lastID(b, sb.LastEventID)
	return sb, nil
}

// readMarks decodes only the watermarks of a meta record, for reads that
// check a cursor against the same transaction they read events from.
func readMarks(b *bbolt.Bucket, id string) (sandbox.Marks, error) {
	var m sandbox.Marks
	if err := json.Unmarshal(b.Get(keyMeta), &m); err != nil {
		return m, fmt.Errorf("sandbox %s: decode meta: %w", id, err)
	}
	return m, nil
}

// readState decodes the state of a sandbox whose buckets are up to date.
func readState(b *bbolt.Bucket, id string) (*sandbox.State, error) {
	st := new(sandbox.State)
	if err := decodeState(b, st); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode state: %w", id, err)
	}
	st.Sandbox.LastEventID = lastID(b, st.Sandbox.LastEventID)
	if st.LogBytes == 0 && st.Sandbox.OldestEventID != 0 {
		// Written before the state counted its log's bytes: counted once
		// here, and stored with the sandbox's next write.
		st.LogBytes = countLogBytes(b)
	}
	return st, nil
}

// recordBytes is the size a stored record counts for in the log's bytes
// (sandbox.State.LogBytes): its envelope, without the type before it.
func recordBytes(v []byte) uint64 {
	if len(v) == 0 {
		return 0
	}
	return uint64(max(len(v)-1-int(v[0]), 0))
}

// countLogBytes reads the size of every record of a sandbox's events
// bucket.
func countLogBytes(b *bbolt.Bucket) uint64 {
	var n uint64
	if events := b.Bucket(bucketEvents); events != nil {
		c := events.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n += recordBytes(v)
		}
	}
	return n
}

// lastID is the last id a sandbox handed out, from which its next ids
// continue. Meta and state record it and the events bucket's sequence
// equals it; should the sequence ever be ahead, it wins, so that no id is
// handed out twice.
func lastID(b *bbolt.Bucket, recorded sandbox.Seq) sandbox.Seq {
	if events := b.Bucket(bucketEvents); events != nil && events.Sequence() > uint64(recorded) {
		return sandbox.Seq(events.Sequence())
	}
	return recorded
}

func notFound(id string) error {
	return sandbox.Errorf(sandbox.ENotFound, "sandbox %s not found", id)
}

// A state of up to stateInlineMax bytes is the state key's value, its
// JSON. A larger one (a running turn of thousands of tool calls holds them
// all) is kept as items: the state key holds stateItemsVersion and the
// JSON of the state without its messages, tools and approvals (the head),
// and the stateitems bucket holds each of those under its list's letter
// and its 4-byte big-endian index. A write puts only the items that
// changed, so a turn that grows writes what it added, where the whole
// state was written again at every materialization, needing each time a
// longer run of consecutive pages than the last write freed: a turn of
// 100,000 tool calls left a file of 606 MiB for 98 MiB of events and
// state (see doc.go, The file's size).
const (
	stateInlineMax    = 64 << 10
	stateItemsVersion = 1
)

// stateLists are the lists of a state kept as items, by letter.
var stateLists = []struct {
	kind  byte
	items func(st *sandbox.State) int
	enc   func(st *sandbox.State, i int) ([]byte, error)
	dec   func(st *sandbox.State, v []byte) error
}{
	{'m', func(st *sandbox.State) int { return len(st.Messages) },
		func(st *sandbox.State, i int) ([]byte, error) { return json.Marshal(&st.Messages[i]) },
		func(st *sandbox.State, v []byte) error { return appendItem(&st.Messages, v) }},
	{'t', func(st *sandbox.State) int { return len(st.Tools) },
		func(st *sandbox.State, i int) ([]byte, error) { return json.Marshal(&st.Tools[i]) },
		func(st *sandbox.State, v []byte) error { return appendItem(&st.Tools, v) }},
	{'a', func(st *sandbox.State) int { return len(st.Approvals) },
		func(st *sandbox.State, i int) ([]byte, error) { return json.Marshal(&st.Approvals[i]) },
		func(st *sandbox.State, v []byte) error { return appendItem(&st.Approvals, v) }},
}

func appendItem[T any](list *[]T, v []byte) error {
	var item T
	if err := json.Unmarshal(v, &item); err != nil {
		return err
	}
	*list = append(*list, item)
	return nil
}

func itemKey(kind byte, i int) []byte {
	return binary.BigEndian.AppendUint32([]byte{kind}, uint32(i))
}

// putState writes the state of a sandbox: its JSON in the state key, or
// its head there and its items in the stateitems bucket (see
// stateInlineMax).
func putState(b *bbolt.Bucket, st *sandbox.State) error {
	n := 0
	for _, l := range stateLists {
		n += l.items(st)
	}
	// An item is a few hundred bytes: a state of few items is written
	// whole without encoding it twice.
	if n < stateInlineMax/1024 {
		return putWholeState(b, st)
	}
	// The head keeps each list's nil-ness: null, or [] to be appended to.
	head := *st
	head.Messages, head.Tools, head.Approvals = st.Messages[:0], st.Tools[:0], st.Approvals[:0]
	hj, err := json.Marshal(&head)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	enc := make([][][]byte, len(stateLists))
	size := len(hj)
	for li, l := range stateLists {
		enc[li] = make([][]byte, l.items(st))
		for i := range enc[li] {
			if enc[li][i], err = l.enc(st, i); err != nil {
				return fmt.Errorf("encode state: %w", err)
			}
			size += len(enc[li][i]) + 1
		}
	}
	if size <= stateInlineMax {
		return putWholeState(b, st)
	}
	items, err := b.CreateBucketIfNotExists(bucketStateItems)
	if err != nil {
		return err
	}
	// Items are appended more than they are inserted: full pages.
	items.FillPercent = 1
	for li, l := range stateLists {
		for i, v := range enc[li] {
			k := itemKey(l.kind, i)
			if bytes.Equal(items.Get(k), v) {
				continue
			}
			if err := items.Put(k, v); err != nil {
				return err
			}
		}
		// The list may have shrunk (an approval resolved).
		var stale [][]byte
		c := items.Cursor()
		for k, _ := c.Seek(itemKey(l.kind, len(enc[li]))); k != nil && k[0] == l.kind; k, _ = c.Next() {
			stale = append(stale, bytes.Clone(k))
		}
		for _, k := range stale {
			if err := items.Delete(k); err != nil {
				return err
			}
		}
	}
	return b.Put(keyState, append([]byte{stateItemsVersion}, hj...))
}

func putWholeState(b *bbolt.Bucket, st *sandbox.State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if b.Bucket(bucketStateItems) != nil {
		if err := b.DeleteBucket(bucketStateItems); err != nil {
			return err
		}
	}
	return b.Put(keyState, data)
}

// stateHead returns the JSON of the state as the state key holds it: the
// whole state, or its head when its lists are items. It is bbolt's memory,
// valid only inside the transaction.
func stateHead(b *bbolt.Bucket) []byte {
	v := b.Get(keyState)
	if len(v) > 0 && v[0] == stateItemsVersion {
		return v[1:]
	}
	return v
}

// decodeState decodes the state of a sandbox from its bucket.
func decodeState(b *bbolt.Bucket, st *sandbox.State) error {
	if err := json.Unmarshal(stateHead(b), st); err != nil {
		return err
	}
	if v := b.Get(keyState); len(v) == 0 || v[0] != stateItemsVersion {
		return nil
	}
	items := b.Bucket(bucketStateItems)
	if items == nil {
		return errors.New("its items are missing")
	}
	c := items.Cursor()
	for _, l := range stateLists {
		i := 0
		for k, v := c.Seek([]byte{l.kind}); k != nil && k[0] == l.kind; k, v = c.Next() {
			if len(k) != 5 || binary.BigEndian.Uint32(k[1:]) != uint32(i) {
				return fmt.Errorf("item %x out of place", k)
			}
			if err := l.dec(st, v); err != nil {
				return fmt.Errorf("item %x: %w", k, err)
			}
			i++
		}
	}
	return nil
}
