package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Bucket and key names of the layout described in doc.go.
var (
	bucketSandboxes = []byte("sandboxes")
	bucketWAL       = []byte("wal")
	bucketEvents    = []byte("events")
	bucketTurns     = []byte("turns")
	bucketApprovals = []byte("approvals")
	keyMeta         = []byte("meta")
	keyState        = []byte("state")
	keyConfig       = []byte("config")
	keyWALMark      = []byte("walmark")
)

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), id) }

func keyID(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

// encodeRecord builds the stored value of an event and the record readers
// share; the record's JSON is a slice of the value, so it is built once.
func encodeRecord(id uint64, ev *sandbox.Event, sandboxID string, data []byte) (value []byte, rec sandbox.Record) {
	head := 1 + len(ev.Type)
	value = make([]byte, head, head+len(data)+len(sandboxID)+len(ev.TurnID)+160)
	value[0] = byte(len(ev.Type))
	copy(value[1:], ev.Type)
	value = sandbox.AppendEnvelope(value, id, ev.Type, ev.TS, sandboxID, ev.TurnID, data)
	return value, sandbox.Record{ID: id, Type: ev.Type, JSON: value[head:]}
}

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
	if err := json.Unmarshal(b.Get(keyState), st); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode state: %w", id, err)
	}
	st.Sandbox.LastEventID = lastID(b, st.Sandbox.LastEventID)
	return st, nil
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
