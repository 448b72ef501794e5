package boltstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// walEntryOf encodes, as the committer does, the WAL entry of an append of
// text events with the given ids to sandbox id, after a mutate that left
// state (nil for none).
func walEntryOf(tb testing.TB, id string, state []byte, ids ...uint64) ([]byte, []stored) {
	tb.Helper()
	s := &Store{now: func() time.Time { return testNow }}
	w, err := s.newAppend(id, textEvents(len(ids)), nil)
	if err != nil {
		tb.Fatal(err)
	}
	copy(w.ids, ids)
	p := &pending{id: id}
	p.addWAL(state, allLists, w)
	return p.entries[0], p.recs
}

func TestWALEntry(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		for _, state := range [][]byte{nil, []byte(`{"sandbox":{}}`)} {
			v, recs := walEntryOf(t, "c_1", state, 41, 42, 1<<40)
			got, err := decodeWALEntry(v)
			if err != nil {
				t.Fatal(err)
			}
			if got.sandbox != "c_1" || !bytes.Equal(got.state, state) || len(got.recs) != len(recs) {
				t.Fatalf("decoded %+v", got)
			}
			for i, r := range got.recs {
				if r.id != recs[i].rec.ID || !bytes.Equal(r.value, recs[i].value) {
					t.Fatalf("record %d: id %d value %q, want %d %q", i, r.id, r.value, recs[i].rec.ID, recs[i].value)
				}
				if rec, err := decodeRecord(idKey(r.id), r.value); err != nil || !bytes.Equal(rec.JSON, recs[i].rec.JSON) || rec.Type != recs[i].rec.Type {
					t.Fatalf("record %d: decoded %+v (%v), want %+v", i, rec, err, recs[i].rec)
				}
			}
		}
	})
	t.Run("ErrMalformed", func(t *testing.T) {
		v, _ := walEntryOf(t, "c_1", nil, 1, 2)
		for name, bad := range map[string][]byte{
			"Empty":     {},
			"Version":   append([]byte{9}, v[1:]...),
			"Truncated": v[:len(v)-1],
			"Trailing":  append(slices.Clone(v), 0),
			"HugeCount": {walEntryVersion, 1, 'c', 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		} {
			if _, err := decodeWALEntry(bad); !errors.Is(err, errBadWALEntry) {
				t.Errorf("%s: err = %v, want %v", name, err, errBadWALEntry)
			}
		}
	})
}

// TestWALValue checks the value of a commit's entries: one entry stands
// alone, several form a batch that decodes to them in order.
func TestWALValue(t *testing.T) {
	v1, _ := walEntryOf(t, "c_1", nil, 1, 2)
	v2, _ := walEntryOf(t, "c_2", []byte(`{"sandbox":{}}`), 7)
	v3, _ := walEntryOf(t, "c_1", nil, 3)
	if got := encodeWALValue([][]byte{v1}); !bytes.Equal(got, v1) {
		t.Fatalf("one entry encoded as %q, want the entry itself", got)
	}
	batch := encodeWALValue([][]byte{v1, v2, v3})
	ents, err := decodeWALValue(batch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, fmt.Sprintf("%s:%d:%d", e.sandbox, len(e.recs), e.recs[0].id))
	}
	if want := []string{"c_1:2:1", "c_2:1:7", "c_1:1:3"}; !slices.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	for name, bad := range map[string][]byte{
		"Empty":     {},
		"NoEntries": {walBatchVersion, 0},
		"Truncated": batch[:len(batch)-1],
		"Trailing":  append(slices.Clone(batch), 0),
		"BadEntry":  encodeWALValue([][]byte{v1, {9}}),
	} {
		if _, err := decodeWALValue(bad); !errors.Is(err, errBadWALEntry) {
			t.Errorf("%s: err = %v, want %v", name, err, errBadWALEntry)
		}
	}
}

// TestAppendValue checks that the value the committer builds from the
// envelope its caller encoded is, byte for byte, the one the envelope
// encoder builds with the id, including where the encoder is not used.
func TestAppendValue(t *testing.T) {
	s := &Store{now: func() time.Time { return testNow }}
	for name, ev := range map[string]*sandbox.Event{
		"Text":   textEvent("turn_1", "part_1", "hi <b> \"q\""),
		"NoTurn": textEvent("", "part_1", "x"),
		"Escape": {Type: sandbox.TypeSandboxError, SandboxID: "c_\"1", Data: &sandbox.SandboxError{Code: "internal"}},
	} {
		t.Run(name, func(t *testing.T) {
			id := ev.SandboxID
			if id == "" {
				id = "c_1"
			}
			w, err := s.newAppend(id, []*sandbox.Event{ev}, nil)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(ev.Data)
			for _, n := range []uint64{1, 42, 1 << 60} {
				w.ids[0] = n
				want, _ := encodeRecord(n, ev, id, data)
				if got := w.appendValue(nil, 0); !bytes.Equal(got, want) {
					t.Fatalf("id %d: got %q, want %q", n, got, want)
				}
				if got, want := w.valueLen(0), len(want); got != want {
					t.Fatalf("id %d: valueLen = %d, want %d", n, got, want)
				}
				// Without the caller's envelope the committer encodes it.
				env := w.envs[0]
				w.envs[0], w.data[0] = nil, data
				if got := w.appendValue(nil, 0); !bytes.Equal(got, want) {
					t.Fatalf("id %d, encoded by the committer: got %q, want %q", n, got, want)
				}
				w.envs[0] = env
			}
		})
	}
}

// TestFoldCopy checks that the state folds the same payload a decode of the
// log gives, for every durable type given by pointer or by value, and that
// the copy shares nothing the caller could change.
func TestFoldCopy(t *testing.T) {
	line := 3
	payloads := map[sandbox.Type]any{
		sandbox.TypeTurnStarted:       &sandbox.TurnStarted{Input: sandbox.TextInput("hi")},
		sandbox.TypeTurnCompleted:     &sandbox.TurnCompleted{Status: sandbox.TurnFailed, StopReason: sandbox.StopError, Error: &sandbox.ErrorInfo{Code: "x", Message: "y"}, Usage: &sandbox.Usage{TotalTokens: 5}},
		sandbox.TypeMessageUpdated:    &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "a <b> & c"},
		sandbox.TypeMessageCompleted:  &sandbox.MessageCompleted{MessageID: "msg_1", Parts: []sandbox.Part{{PartID: "part_1", Text: "a"}}, Text: "a"},
		sandbox.TypeToolUpdated:       &sandbox.ToolUpdated{ToolCallID: "tool_1", Locations: []sandbox.Location{{Path: "a.go", Line: &line}}},
		sandbox.TypeApprovalRequested: &sandbox.ApprovalRequested{ApprovalID: "appr_1", Options: []sandbox.Option{{OptionID: "o"}}, ExpiresAt: testNow},
		sandbox.TypeApprovalResolved:  &sandbox.ApprovalResolved{ApprovalID: "appr_1", Decision: sandbox.DecisionDenied},
		sandbox.TypeSandboxError:      &sandbox.SandboxError{Code: "internal", Message: "m"},
	}
	for typ, p := range payloads {
		t.Run(string(typ), func(t *testing.T) {
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			decoded, err := sandbox.DecodeData(typ, data)
			if err != nil {
				t.Fatal(err)
			}
			byValue := reflectElem(p)
			for name, in := range map[string]any{"Pointer": p, "Value": byValue} {
				got, ok := foldCopy(typ, in)
				if !ok {
					t.Fatalf("%s: not copied", name)
				}
				if got, want := mustJSON(t, got), mustJSON(t, decoded); got != want {
					t.Fatalf("%s: copy %s, decoded %s", name, got, want)
				}
				if fmt.Sprintf("%T", got) != fmt.Sprintf("%T", decoded) {
					t.Fatalf("%s: copy is a %T, decoded a %T", name, got, decoded)
				}
			}
			if _, ok := foldCopy(sandbox.TypeSandboxError, &sandbox.TurnStarted{}); ok && typ != sandbox.TypeSandboxError {
				t.Fatal("copied a payload of another type")
			}
		})
	}
	t.Run("Deep", func(t *testing.T) {
		tool := payloads[sandbox.TypeToolUpdated].(*sandbox.ToolUpdated)
		got, _ := foldCopy(sandbox.TypeToolUpdated, tool)
		*tool.Locations[0].Line, tool.Locations[0].Path = 99, "changed"
		if c := got.(*sandbox.ToolUpdated); *c.Locations[0].Line != 3 || c.Locations[0].Path != "a.go" {
			t.Fatalf("the copy changed with the caller's payload: %+v", c.Locations[0])
		}
	})
	t.Run("Fallback", func(t *testing.T) {
		for name, in := range map[string]any{
			"NilPointer": (*sandbox.MessageUpdated)(nil),
			"OtherType":  &sandbox.ToolUpdated{},
			"Raw":        json.RawMessage(`{"text":"x"}`),
		} {
			if _, ok := foldCopy(sandbox.TypeMessageUpdated, in); ok {
				t.Errorf("%s: copied; want it decoded instead", name)
			}
		}
	})
}

// reflectElem returns the value a payload pointer points to, as an any.
func reflectElem(p any) any {
	switch v := p.(type) {
	case *sandbox.TurnStarted:
		return *v
	case *sandbox.TurnCompleted:
		return *v
	case *sandbox.MessageUpdated:
		return *v
	case *sandbox.MessageCompleted:
		return *v
	case *sandbox.ToolUpdated:
		return *v
	case *sandbox.ApprovalRequested:
		return *v
	case *sandbox.ApprovalResolved:
		return *v
	case *sandbox.SandboxError:
		return *v
	}
	panic(fmt.Sprintf("no payload: %T", p))
}
