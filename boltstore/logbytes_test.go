package boltstore

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// logSize is what the retained records of a sandbox count for in its
// log's bytes.
func logSize(tb testing.TB, s *Store, id string) uint64 {
	tb.Helper()
	var n uint64
	for after := uint64(0); ; {
		recs := mustRead(tb, s, id, after, 100)
		if len(recs) == 0 {
			return n
		}
		for _, r := range recs {
			n += uint64(len(r.JSON))
		}
		after = recs[len(recs)-1].ID
	}
}

func mustLogBytes(tb testing.TB, s *Store, id string) (log, turn uint64) {
	tb.Helper()
	log, turn, err := s.LogBytes(id)
	if err != nil {
		tb.Fatal(err)
	}
	return log, turn
}

// TestLogBytesCrash: the counts a crash leaves in the WAL come back with
// its replay, for a sandbox half materialized and one not at all.
func TestLogBytesCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	appendTurn(t, s, "c_1", "turn_1", true)
	mustFlush(t, s)
	appendTurn(t, s, "c_1", "turn_2", false)
	appendTurn(t, s, "c_2", "turn_1", false)
	type counts struct{ log, turn uint64 }
	before := map[string]counts{}
	for _, id := range []string{"c_1", "c_2"} {
		log, turn := mustLogBytes(t, s, id)
		if log == 0 || turn == 0 || turn >= log && id == "c_1" {
			t.Fatalf("%s counts %d bytes of log, %d of its turn", id, log, turn)
		}
		before[id] = counts{log, turn}
	}
	crashClose(t, s)
	if walEntries(t, path) == 0 {
		t.Fatal("the crash left an empty WAL: nothing to replay")
	}

	s = MustOpenStoreAt(t, path, Options{})
	for id, want := range before {
		log, turn := mustLogBytes(t, s, id)
		if got := (counts{log, turn}); got != want {
			t.Fatalf("%s after replay counts %+v, want %+v", id, got, want)
		}
		if size := logSize(t, s, id); log != size {
			t.Fatalf("%s counts %d bytes, its log holds %d", id, log, size)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestLogBytesUnloaded: a sandbox whose state is not in memory answers from
// the file without being loaded.
func TestLogBytesUnloaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	appendTurn(t, s, "c_1", "turn_1", true)
	want, wantTurn := mustLogBytes(t, s, "c_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = MustOpenStoreAt(t, path, Options{})
	log, turn := mustLogBytes(t, s, "c_1")
	if log != want || turn != wantTurn {
		t.Fatalf("after reopen: %d and %d bytes, want %d and %d", log, turn, want, wantTurn)
	}
	s.mu.RLock()
	loaded := s.sandboxes["c_1"] != nil
	s.mu.RUnlock()
	if loaded {
		t.Fatal("LogBytes loaded the sandbox into memory")
	}
	if _, _, err := s.LogBytes("c_404"); errType(err) != sandbox.ENotFound {
		t.Fatalf("LogBytes(unknown) = %v, want not_found", err)
	}
}

// TestLogBytesLegacy: a file written before states counted their log's
// bytes passes the check as it is, and its sandboxes are counted when
// loaded and stored so with their next write.
func TestLogBytesLegacy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	appendTurn(t, s, "c_1", "turn_1", true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setState(t, path, "c_1", func(st map[string]any) {
		delete(st, "log_bytes")
		delete(st, "turn_bytes")
	})
	checkFile(t, path, "")

	s = MustOpenStoreAt(t, path, Options{})
	log, _ := mustLogBytes(t, s, "c_1")
	if size := logSize(t, s, "c_1"); log == 0 || log != size {
		t.Fatalf("a state without the count counts %d bytes, its log holds %d", log, size)
	}
	mustAppend(t, s, "c_1", textEvents(1)...)
	mustFlush(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var st sandbox.State
	readStateKey(t, path, "c_1", &st)
	if want := log; st.LogBytes <= want {
		t.Fatalf("stored count after a write = %d, want above %d", st.LogBytes, want)
	}
	checkFile(t, path, "")
}

// TestCheckLogBytes: a count that is not what the events bucket holds is
// damage the check reports.
func TestCheckLogBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvents(3)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setState(t, path, "c_1", func(st map[string]any) { st["log_bytes"] = 5 })
	checkFile(t, path, "bytes of events")
}

// setState rewrites the state of a sandbox of a closed store file, which
// must be small enough to be kept whole.
func setState(tb testing.TB, path, id string, change func(map[string]any)) {
	tb.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketSandboxes).Bucket([]byte(id))
		var st map[string]any
		if err := json.Unmarshal(b.Get(keyState), &st); err != nil {
			return err
		}
		change(st)
		v, err := json.Marshal(st)
		if err != nil {
			return err
		}
		return b.Put(keyState, v)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func readStateKey(tb testing.TB, path, id string, st *sandbox.State) {
	tb.Helper()
	viewFile(tb, path, func(tx *bbolt.Tx) error {
		return decodeState(tx.Bucket(bucketSandboxes).Bucket([]byte(id)), st)
	})
}

// checkFile runs the offline check; want is "" for none, else what the
// error must say.
func checkFile(tb testing.TB, path, want string) {
	tb.Helper()
	err := CheckFile(context.Background(), path, CompactOptions{})
	switch {
	case want == "" && err != nil:
		tb.Fatalf("check: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		tb.Fatalf("check = %v, want an error about %q", err, want)
	}
}
