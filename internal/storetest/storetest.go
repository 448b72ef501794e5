// Package storetest is the conformance suite of the event stores: one table
// of behaviours that the coordinator and the retention loop rely on, run
// against every implementation (boltstore, natsstore) from its own tests.
// A behaviour a store gets wrong shows up here under the same name for
// every store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Store is what the suite exercises: the coordinator's store and the
// retention methods that move the watermarks.
type Store interface {
	sandbox.Store
	// Prune removes every event with id <= through, advancing
	// pruned_through and oldest_event_id.
	Prune(ctx context.Context, id string, through uint64, batch int) (removed int, err error)
	// Compact removes the given events from anywhere in the log.
	Compact(ctx context.Context, id string, ids []uint64) (removed int, err error)
	// LogBytes returns the bytes of the retained log and those its
	// current or last turn took (sandbox.State.LogBytes, TurnBytes).
	LogBytes(id string) (log, turn uint64, err error)
}

// Opener opens a fresh, empty store for one test and registers its cleanup
// with t. reopen closes the store and opens the same backing store again
// (the same file, the same stream), as after a restart of the process; it
// is nil for a store that cannot be reopened, and the tests of that are
// skipped.
type Opener func(t *testing.T) (s Store, reopen func() Store)

// Run runs the whole suite, each behaviour as a subtest on a store of its own.
func Run(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"Create", testCreate},
		{"NotFound", testNotFound},
		{"Sandboxes", testSandboxes},
		{"Append", testAppend},
		{"Read", testRead},
		{"Reopen", testReopen},
		{"StateFold", testStateFold},
		{"Mutate", testMutate},
		{"Wait", testWait},
		{"Prune", testPrune},
		{"Compact", testCompact},
		{"LogBytes", testLogBytes},
		{"Drop", testDrop},
		{"Concurrent", testConcurrent},
		{"LongTurn", testLongTurn},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

// T0 is the time of every event the suite stamps itself.
var T0 = time.Date(2026, 8, 6, 14, 0, 0, 123000000, time.UTC)

func openStore(t *testing.T, open Opener) Store {
	t.Helper()
	s, _ := open(t)
	return s
}

func newSandbox(id string) sandbox.Sandbox {
	return sandbox.Sandbox{
		ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo",
		CreatedAt: T0, UpdatedAt: T0, Metadata: map[string]string{"team": "a"},
	}
}

func mustCreate(tb testing.TB, s Store, id string) {
	tb.Helper()
	if err := s.Create(context.Background(), newSandbox(id), []byte(`{"env":{}}`)); err != nil {
		tb.Fatal(err)
	}
}

// mustAppend appends events and returns the ids Append assigned.
func mustAppend(tb testing.TB, s Store, id string, evs ...*sandbox.Event) []uint64 {
	tb.Helper()
	if err := s.Append(context.Background(), id, evs, nil); err != nil {
		tb.Fatal(err)
	}
	return eventIDs(evs)
}

func eventIDs(evs []*sandbox.Event) []uint64 {
	ids := make([]uint64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

func mustRead(tb testing.TB, s Store, id string, after uint64, limit int) []sandbox.Record {
	tb.Helper()
	recs, err := s.Read(context.Background(), id, after, limit)
	if err != nil {
		tb.Fatalf("read %s after %d: %v", id, after, err)
	}
	return recs
}

// readAll pages through every retained record of a sandbox.
func readAll(tb testing.TB, s Store, id string) []sandbox.Record {
	tb.Helper()
	var all []sandbox.Record
	var after uint64
	for {
		recs := mustRead(tb, s, id, after, 7)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
		after = recs[len(recs)-1].ID
	}
}

func recordIDs(recs []sandbox.Record) []uint64 {
	ids := make([]uint64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// above returns the ids in sorted list that are > after, at most limit.
func above(list []uint64, after uint64, limit int) []uint64 {
	var out []uint64
	for _, id := range list {
		if id > after && len(out) < limit {
			out = append(out, id)
		}
	}
	return out
}

func textEvent(turnID, partID, text string) *sandbox.Event {
	return &sandbox.Event{
		Type: sandbox.TypeMessageUpdated, TurnID: turnID, TS: T0,
		Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: partID, Kind: sandbox.PartText, Text: text},
	}
}

func textEvents(n int) []*sandbox.Event {
	evs := make([]*sandbox.Event, n)
	for i := range evs {
		evs[i] = textEvent("", "part_1", fmt.Sprintf("hello %d", i))
	}
	return evs
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func errType(err error) string {
	if err == nil {
		return ""
	}
	return sandbox.ErrorType(err)
}

// WantMarks checks the watermarks everywhere a store shows them: the
// sandbox, its state and its head.
func WantMarks(t *testing.T, s Store, id string, want sandbox.Marks) {
	t.Helper()
	sb, err := s.Sandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.Marks(); got != want {
		t.Fatalf("sandbox marks = %+v, want %+v", got, want)
	}
	st, err := s.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Marks(); got != want {
		t.Fatalf("state marks = %+v, want %+v", got, want)
	}
	head, err := s.Head(id)
	if err != nil {
		t.Fatal(err)
	}
	if head.LastEventID != uint64(want.LastEventID) || head.PrunedThrough != uint64(want.PrunedThrough) {
		t.Fatalf("head = %+v, want marks %+v", head, want)
	}
}

// wantCursorErr checks that Read refuses a cursor with the given error type
// and watermarks.
func wantCursorErr(t *testing.T, s Store, id string, after uint64, typ string, marks sandbox.Marks) {
	t.Helper()
	_, err := s.Read(context.Background(), id, after, 10)
	var serr *sandbox.Error
	if !errors.As(err, &serr) || serr.Type != typ {
		t.Fatalf("Read(after %d): err = %v, want %s", after, err, typ)
	}
	if serr.Marks == nil || *serr.Marks != marks {
		t.Fatalf("Read(after %d): marks = %+v, want %+v", after, serr.Marks, marks)
	}
}

// waitClosed fails the test unless ch is closed within a generous deadline.
func waitClosed(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatalf("%s: wait channel not closed", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// WaitHead waits, on the store's wake-ups, until s has seen the last id
// of sandbox id reach last: a store that shares its log with other
// processes sees their appends a moment later.
func WaitHead(tb testing.TB, s sandbox.Store, id string, last uint64) {
	tb.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := s.Wait(id)
		head, err := s.Head(id)
		if err != nil {
			tb.Fatal(err)
		}
		if head.LastEventID >= last {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("%s: head stuck at %d, want %d", id, head.LastEventID, last)
		}
	}
}
