package boltstore

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// foldCopy returns a copy of an event's payload for the state to fold: it
// shares nothing mutable with the caller's payload and holds what decoding
// the payload's JSON would give (times as the envelope writes them), at a
// fraction of the cost of a decode. It reports false for data that is not
// the payload type of typ, which the caller decodes instead.
func foldCopy(typ sandbox.Type, data any) (any, bool) {
	switch typ {
	case sandbox.TypeMessageUpdated:
		return copyPayload(data, func(v sandbox.MessageUpdated) sandbox.MessageUpdated { return v })
	case sandbox.TypeMessageCompleted:
		return copyPayload(data, func(v sandbox.MessageCompleted) sandbox.MessageCompleted {
			v.Parts = slices.Clone(v.Parts)
			return v
		})
	case sandbox.TypeToolUpdated:
		return copyPayload(data, func(v sandbox.ToolUpdated) sandbox.ToolUpdated {
			v.Locations = sandbox.CloneLocations(v.Locations)
			return v
		})
	case sandbox.TypeTurnStarted:
		return copyPayload(data, func(v sandbox.TurnStarted) sandbox.TurnStarted {
			v.Input = slices.Clone(v.Input)
			return v
		})
	case sandbox.TypeTurnCompleted:
		return copyPayload(data, func(v sandbox.TurnCompleted) sandbox.TurnCompleted {
			v.Error, v.Usage = sandbox.ClonePtr(v.Error), sandbox.ClonePtr(v.Usage)
			return v
		})
	case sandbox.TypeApprovalRequested:
		return copyPayload(data, func(v sandbox.ApprovalRequested) sandbox.ApprovalRequested {
			v.Options = slices.Clone(v.Options)
			v.ExpiresAt = foldTime(v.ExpiresAt)
			return v
		})
	case sandbox.TypeApprovalResolved:
		return copyPayload(data, func(v sandbox.ApprovalResolved) sandbox.ApprovalResolved { return v })
	case sandbox.TypeSandboxError:
		return copyPayload(data, func(v sandbox.SandboxError) sandbox.SandboxError { return v })
	}
	return nil, false
}

func copyPayload[T any](data any, clone func(T) T) (any, bool) {
	switch d := data.(type) {
	case *T:
		if d == nil {
			return nil, false
		}
		c := clone(*d)
		return &c, true
	case T:
		c := clone(d)
		return &c, true
	}
	return nil, false
}

// nullID is how an envelope without an id begins.
var nullID = []byte(`{"id":null`)

// envelopeAfterID encodes an event's envelope without its id: what follows
// the id, which only the committer knows. Encoding it in the caller's
// goroutine leaves the committer a concatenation (appendValue).
func envelopeAfterID(ev *sandbox.Event, sandboxID string, data []byte) ([]byte, bool) {
	buf := make([]byte, 0, len(data)+len(sandboxID)+len(ev.TurnID)+len(ev.Type)+160)
	env := sandbox.AppendEnvelope(buf, 0, ev.Type, ev.TS, sandboxID, ev.TurnID, data)
	if !bytes.HasPrefix(env, nullID) {
		return nil, false
	}
	return env[len(nullID):], true
}

// appendValue appends the events bucket value of the write's event i, with
// the id the committer gave it: the type length, the type, the envelope.
// The bytes are the layout's (doc.go); encode_test.go checks them against a
// reference encoder.
func (w *appendWrite) appendValue(b []byte, i int) []byte {
	ev := w.events[i]
	b = append(b, byte(len(ev.Type)))
	b = append(b, ev.Type...)
	if env := w.envs[i]; env != nil {
		b = append(b, `{"id":"`...)
		b = strconv.AppendUint(b, w.ids[i], 10)
		b = append(b, '"')
		return append(b, env...)
	}
	return sandbox.AppendEnvelope(b, w.ids[i], ev.Type, ev.TS, w.id, ev.TurnID, w.data[i])
}

// valueLen is the length of what appendValue appends.
func (w *appendWrite) valueLen(i int) int {
	env := w.envs[i]
	if env == nil {
		return len(w.appendValue(nil, i))
	}
	var digits [20]byte
	return 1 + len(w.events[i].Type) + len(`{"id":""`) + len(strconv.AppendUint(digits[:0], w.ids[i], 10)) + len(env)
}

// storedAt returns the stored record of the write's event i whose value is
// value.
func (w *appendWrite) storedAt(i int, value []byte) stored {
	typ := w.events[i].Type
	return stored{rec: sandbox.Record{ID: w.ids[i], Type: typ, JSON: value[1+len(typ):]}, value: value}
}
