package boltstore

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// testNow is the fixed clock of the tests: not UTC and finer than a
// millisecond, so encoding has to normalize it.
var testNow = time.Date(2026, 8, 6, 14, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))

// MustOpenStore opens a store on a fresh file in tb.TempDir with a fixed
// clock. Cleanup checks the file with bbolt's consistency check and closes it.
func MustOpenStore(tb testing.TB) *Store {
	tb.Helper()
	return MustOpenStoreAt(tb, filepath.Join(tb.TempDir(), "sparkles.db"), Options{})
}

// MustOpenStoreAt opens a store at path; a test that closes the store itself
// (to reopen the file) skips the cleanup check of that instance.
func MustOpenStoreAt(tb testing.TB, path string, opts Options) *Store {
	tb.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return testNow }
	}
	s, err := open(path, opts, walLimits{}, new(testHooks))
	if err != nil {
		tb.Fatal(err)
	}
	checkOnCleanup(tb, s, path)
	return s
}

// mustOpenLimits opens a store at path with the given materialization
// limits, which tests lower to make the committer materialize often.
func mustOpenLimits(tb testing.TB, path string, opts Options, limits walLimits) *Store {
	tb.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return testNow }
	}
	s, err := open(path, opts, limits, new(testHooks))
	if err != nil {
		tb.Fatal(err)
	}
	checkOnCleanup(tb, s, path)
	return s
}

func checkOnCleanup(tb testing.TB, s *Store, path string) {
	tb.Cleanup(func() {
		s.closeMu.RLock()
		closed := s.closed
		s.closeMu.RUnlock()
		if closed {
			return
		}
		if err := s.Check(); err != nil {
			tb.Errorf("check %s: %v", path, err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("close %s: %v", path, err)
		}
	})
}

func newSandbox(id string) sandbox.Sandbox {
	return sandbox.Sandbox{
		ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo",
		CreatedAt: testNow, UpdatedAt: testNow, Metadata: map[string]string{"team": "a"},
	}
}

func mustCreate(tb testing.TB, s *Store, id string) {
	tb.Helper()
	if err := s.Create(context.Background(), newSandbox(id), []byte(`{"env":{}}`)); err != nil {
		tb.Fatal(err)
	}
}

// mustAppend appends events and returns the ids Append assigned.
func mustAppend(tb testing.TB, s *Store, id string, evs ...*sandbox.Event) []uint64 {
	tb.Helper()
	if err := s.Append(context.Background(), id, evs, nil); err != nil {
		tb.Fatal(err)
	}
	ids := make([]uint64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

func mustRead(tb testing.TB, s *Store, id string, after uint64, limit int) []sandbox.Record {
	tb.Helper()
	recs, err := s.Read(context.Background(), id, after, limit)
	if err != nil {
		tb.Fatalf("read %s after %d: %v", id, after, err)
	}
	return recs
}

func recordIDs(recs []sandbox.Record) []uint64 {
	ids := make([]uint64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// seq returns the ids from..to inclusive.
func seq(from, to uint64) []uint64 {
	var ids []uint64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

func textEvent(turnID, partID, text string) *sandbox.Event {
	return &sandbox.Event{
		Type: sandbox.TypeMessageUpdated, TurnID: turnID,
		Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: partID, Kind: sandbox.PartText, Text: text},
	}
}

func textEvents(n int) []*sandbox.Event {
	evs := make([]*sandbox.Event, n)
	for i := range evs {
		evs[i] = textEvent("", "part_1", "hello")
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

// encodeRecord builds the stored value of an event field by field, as the
// layout in doc.go gives it, and the record a reader gets from it: the
// reference the committer's appendValue is checked against.
func encodeRecord(id uint64, ev *sandbox.Event, sandboxID string, data []byte) (value []byte, rec sandbox.Record) {
	head := 1 + len(ev.Type)
	value = make([]byte, head, head+len(data)+len(sandboxID)+len(ev.TurnID)+160)
	value[0] = byte(len(ev.Type))
	copy(value[1:], ev.Type)
	value = sandbox.AppendEnvelope(value, id, ev.Type, ev.TS, sandboxID, ev.TurnID, data)
	return value, sandbox.Record{ID: id, Type: ev.Type, JSON: value[head:]}
}
