package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var t0 = time.Date(2026, 8, 6, 14, 0, 0, 0, time.UTC)

func mustCreate(tb testing.TB, s *natsstore.Store, id string) {
	tb.Helper()
	sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: t0, UpdatedAt: t0}
	if err := s.Create(context.Background(), sb, []byte(`{}`)); err != nil {
		tb.Fatal(err)
	}
}

func textEvent(text string) *sandbox.Event {
	return &sandbox.Event{Type: sandbox.TypeMessageUpdated, TS: t0,
		Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: text}}
}

func mustAppend(tb testing.TB, s *natsstore.Store, id string, evs ...*sandbox.Event) []uint64 {
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

func readIDs(tb testing.TB, s *natsstore.Store, id string) []uint64 {
	tb.Helper()
	var ids []uint64
	var after uint64
	for {
		recs, err := s.Read(context.Background(), id, after, 100)
		if err != nil {
			tb.Fatal(err)
		}
		if len(recs) == 0 {
			return ids
		}
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		after = recs[len(recs)-1].ID
	}
}

func jsonOf(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// TestTwoProcesses runs two stores on one server, as two coordinators
// sharing it: what one writes, the other reads, and writes from both to one
// sandbox keep the state consistent with the log.
func TestTwoProcesses(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	a, b := mustOpenChecked(t, url), mustOpenChecked(t, url)
	mustCreate(t, a, "c_1")

	t.Run("CreateSeen", func(t *testing.T) {
		sb, err := b.Sandbox(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if sb.Status != sandbox.StatusReady {
			t.Fatalf("other process sees %s", jsonOf(t, sb))
		}
		list, _, err := b.Sandboxes(ctx, "", 10)
		if err != nil || len(list) != 1 {
			t.Fatalf("other process lists %v, %v", list, err)
		}
	})
	t.Run("AppendWakesOther", func(t *testing.T) {
		ch := b.Wait("c_1")
		ids := mustAppend(t, a, "c_1", textEvent("a"), textEvent("ab"))
		waitClosed(t, ch)
		storetest.WaitHead(t, b, "c_1", ids[1])
		if got := readIDs(t, b, "c_1"); !slices.Equal(got, ids) {
			t.Fatalf("other process reads %v, want %v", got, ids)
		}
		sa, _ := a.State(ctx, "c_1")
		sb, _ := b.State(ctx, "c_1")
		if got, want := jsonOf(t, sb), jsonOf(t, sa); got != want {
			t.Fatalf("other process's state\n got %s\nwant %s", got, want)
		}
	})
	t.Run("CursorFromOther", func(t *testing.T) {
		// A client that read a's tail reconnects to b before b's watch has
		// caught up: its cursor is not stale. b's watch is held back, so
		// b has not heard of the append; the Read looks in the bucket,
		// and b's state is then as new as the cursor (a stream opened on
		// b checks the cursor against that state).
		release := make(chan struct{})
		natsstore.SetWatchHook(b, func(string) { <-release })
		defer natsstore.SetWatchHook(b, nil)
		defer close(release)
		ids := mustAppend(t, a, "c_1", textEvent("abc"))
		if _, err := b.Read(ctx, "c_1", ids[0], 10); err != nil {
			t.Fatalf("Read on the other process at the newest cursor: %v", err)
		}
		st, err := b.State(ctx, "c_1")
		if err != nil {
			t.Fatal(err)
		}
		if got := uint64(st.Sandbox.LastEventID); got < ids[0] {
			t.Fatalf("the other process's state after the Read is at %d, want %d", got, ids[0])
		}
	})
	t.Run("WritersTakeTurns", func(t *testing.T) {
		// Every append counts itself in the sandbox's metadata with its
		// mutate: when the two processes race, a conflict folds again and
		// runs mutate again on the newer state, so no count is lost or
		// doubled, and every event is in the state's fold once.
		mustCreate(t, a, "c_2")
		const perWriter = 15
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, s := range []*natsstore.Store{a, b, a, b} {
			wg.Go(func() {
				for i := range perWriter {
					err := s.Append(ctx, "c_2", []*sandbox.Event{textEvent(fmt.Sprint(i))}, func(st *sandbox.State) error {
						n, _ := strconv.Atoi(st.Sandbox.Metadata["n"])
						if st.Sandbox.Metadata == nil {
							st.Sandbox.Metadata = map[string]string{}
						}
						st.Sandbox.Metadata["n"] = strconv.Itoa(n + 1)
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		st, err := a.State(ctx, "c_2")
		if err != nil {
			t.Fatal(err)
		}
		ids := readIDs(t, a, "c_2")
		if got, want := len(ids), 4*perWriter; got != want {
			t.Fatalf("log holds %d events, want %d", got, want)
		}
		if got, want := st.Sandbox.Metadata["n"], strconv.Itoa(4*perWriter); got != want {
			t.Fatalf("mutate ran %s times, want %s", got, want)
		}
		if got, want := uint64(st.Sandbox.LastEventID), ids[len(ids)-1]; got != want {
			t.Fatalf("state last id %d, want %d", got, want)
		}
		if err := a.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

func waitClosed(tb testing.TB, ch <-chan struct{}) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatal("wait channel not closed")
	}
}

// publishLeftover publishes events to a sandbox's subject as an append
// that died before its state update would have, and returns their ids.
func publishLeftover(tb testing.TB, js jetstream.JetStream, id string, evs ...*sandbox.Event) []uint64 {
	tb.Helper()
	var ids []uint64
	for _, ev := range evs {
		data, err := json.Marshal(ev.Data)
		if err != nil {
			tb.Fatal(err)
		}
		body := sandbox.AppendEnvelope(nil, 0, ev.Type, ev.TS, id, ev.TurnID, data)
		ack, err := js.Publish(context.Background(), "sparkles.events."+id, body)
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, ack.Sequence)
	}
	return ids
}

// TestRepair leaves events in the stream beyond a sandbox's state, as an
// append does when its process dies between the acknowledgements and the
// state update: no reader sees them, and the next writer folds them in.
func TestRepair(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	mustCreate(t, s, "c_2")
	kept := mustAppend(t, s, "c_1", textEvent("a"))
	turnStarted := &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_9", TS: t0,
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}}

	t.Run("Invisible", func(t *testing.T) {
		publishLeftover(t, js, "c_1", turnStarted, textEvent("ab"))
		if got := readIDs(t, s, "c_1"); !slices.Equal(got, kept) {
			t.Fatalf("read %v, want only %v", got, kept)
		}
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), "beyond last_event_id") {
			t.Fatalf("Check = %v, want the events beyond the state reported", err)
		}
	})
	t.Run("OnOpen", func(t *testing.T) {
		other := mustOpenChecked(t, url)
		ids := readIDs(t, other, "c_1")
		if len(ids) != 3 || ids[0] != kept[0] {
			t.Fatalf("after Open: log %v, want %d and the two left over", ids, kept[0])
		}
		turn, err := other.Turn(ctx, "c_1", "turn_9")
		if err != nil || turn.Status != sandbox.TurnRunning {
			t.Fatalf("turn of a folded event: %+v, %v", turn, err)
		}
		storetest.WaitHead(t, s, "c_1", ids[2]) // the first process learns it too
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OnAppend", func(t *testing.T) {
		// The writer's cached state does not know of them: its append is
		// refused by the stream, folds them in, and goes on after them.
		mustAppend(t, s, "c_2", textEvent("x"))
		left := publishLeftover(t, js, "c_2", textEvent("left over"))
		ids := mustAppend(t, s, "c_2", textEvent("y"))
		if ids[0] <= left[0] {
			t.Fatalf("append got id %d, want it after the leftover %d", ids[0], left[0])
		}
		st, err := s.State(ctx, "c_2")
		if err != nil {
			t.Fatal(err)
		}
		if got := len(readIDs(t, s, "c_2")); got != 3 || uint64(st.Sandbox.LastEventID) != ids[0] {
			t.Fatalf("log of %d events with state at %d, want 3 and %d", got, st.Sandbox.LastEventID, ids[0])
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPublishRefused makes the stream refuse the second event of an append
// (too large): the first, already stored, is taken back, so the append
// leaves nothing behind.
func TestPublishRefused(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	kept := mustAppend(t, s, "c_1", textEvent("a"))
	stream, err := js.Stream(ctx, natsstore.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 1024
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	err = s.Append(ctx, "c_1", []*sandbox.Event{textEvent("small"), textEvent(strings.Repeat("x", 2048))}, nil)
	if err == nil {
		t.Fatal("append of an oversized event succeeded")
	}
	if got := readIDs(t, s, "c_1"); !slices.Equal(got, kept) {
		t.Fatalf("log %v, want %v", got, kept)
	}
	if head, _ := s.Head("c_1"); head.LastEventID != kept[0] {
		t.Fatalf("head %+v, want last %d", head, kept[0])
	}
	if err := s.Check(); err != nil {
		t.Fatalf("the refused append left events behind: %v", err)
	}
	if got := mustAppend(t, s, "c_1", textEvent("b")); got[0] <= kept[0] {
		t.Fatalf("next id %d, want above %d", got[0], kept[0])
	}
}

// TestDropKeys checks that Drop leaves no key of the sandbox in the bucket.
func TestDropKeys(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	s := mustOpenChecked(t, url)
	for _, id := range []string{"c_1", "c_2"} {
		mustCreate(t, s, id)
		mustAppend(t, s, id,
			&sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_1", TS: t0, Data: &sandbox.TurnStarted{}},
			&sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: "turn_1", TS: t0, Data: &sandbox.ApprovalRequested{ApprovalID: "appr_1"}})
	}
	if err := s.Drop(ctx, "c_1"); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, natsstore.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"appr.c_2.appr_1", "config.c_2", "state.c_2", "turn.c_2.turn_1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys after Drop = %v, want %v", keys, want)
	}
}

func TestClose(t *testing.T) {
	url, _ := natstest.RunServer(t)
	s := mustOpen(t, url)
	mustCreate(t, s, "c_1")
	wait := s.Wait("c_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, wait)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Append(context.Background(), "c_1", []*sandbox.Event{textEvent("x")}, nil); !errors.Is(err, natsstore.ErrClosed) {
		t.Fatalf("Append after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.Read(context.Background(), "c_1", 0, 1); !errors.Is(err, natsstore.ErrClosed) {
		t.Fatalf("Read after Close: err = %v, want ErrClosed", err)
	}
}

func TestOpen(t *testing.T) {
	t.Run("ErrNoServer", func(t *testing.T) {
		url, stop := natstest.RunServer(t)
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := natsstore.Open(ctx, url, natsstore.Options{})
		if err == nil || !strings.Contains(err.Error(), url) {
			t.Fatalf("Open without a server: err = %v, want one naming %s", err, url)
		}
	})
	t.Run("MaxAge", func(t *testing.T) {
		ctx := context.Background()
		url, _ := natstest.RunServer(t)
		s, err := natsstore.Open(ctx, url, natsstore.Options{MaxAge: 30 * 24 * time.Hour, StreamName: "OTHER", KVBucket: "other", SubjectPrefix: "other.events"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stream, err := natstest.JetStream(t, url).Stream(ctx, "OTHER")
		if err != nil {
			t.Fatal(err)
		}
		cfg := stream.CachedInfo().Config
		if cfg.MaxAge != 30*24*time.Hour || !slices.Equal(cfg.Subjects, []string{"other.events.*", "other.events-fence.*"}) || cfg.Storage != jetstream.FileStorage {
			t.Fatalf("stream config %+v", cfg)
		}
	})
}

type countingObserver struct {
	mu            sync.Mutex
	events, calls int
	syncs         []time.Duration
	took          time.Duration
}

func (o *countingObserver) Commit(events int, took, sync time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events += events
	o.calls++
	o.took += took
	if sync != 0 {
		o.syncs = append(o.syncs, sync)
	}
}

// TestObserver: every append that made events durable is observed with its
// events, an append that failed or wrote none is not, and the sync time is
// 0 (the server's syncs are not seen from here).
func TestObserver(t *testing.T) {
	url, _ := natstest.RunServer(t)
	obs := &countingObserver{}
	s, err := natsstore.Open(context.Background(), url, natsstore.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvent("a"), textEvent("b"))
	mustAppend(t, s, "c_1", textEvent("c"))
	if err := s.Append(context.Background(), "c_unknown", []*sandbox.Event{textEvent("x")}, nil); err == nil {
		t.Fatal("append to an unknown sandbox succeeded")
	}
	if err := s.Append(context.Background(), "c_1", nil, func(*sandbox.State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.events != 3 || obs.calls != 2 {
		t.Fatalf("observed %d events in %d appends, want 3 in 2", obs.events, obs.calls)
	}
	if obs.took <= 0 || len(obs.syncs) > 0 {
		t.Fatalf("observed took %v, syncs %v; want some time and no syncs", obs.took, obs.syncs)
	}
}

// TestLaggingReplica: a direct get may be answered by a replica of the
// bucket that has not caught up, which says "not found" for a key written
// a moment ago. The store asks the stream's leader before it believes
// that: a sandbox another process just created is found, and is not
// forgotten; so is a key of a bucket opened for the cluster; a key that
// was deleted, or never written, is not found.
func TestLaggingReplica(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	a, b := mustOpenChecked(t, url), mustOpenChecked(t, url)
	natsstore.SetLagging(b, func(string) bool { return true })
	mustCreate(t, a, "c_new")
	mustAppend(t, a, "c_new", &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_1", TS: t0, Data: &sandbox.TurnStarted{}})
	// b reads the state through its bucket (it may know the sandbox from
	// its watch already; Turn and Config read keys of their own).
	if _, err := b.Sandbox(ctx, "c_new"); err != nil {
		t.Fatalf("a sandbox created by another process, read while the replica lags: %v", err)
	}
	// An append reads the state from the bucket before it writes; a not
	// found there used to make b forget the sandbox.
	mustAppend(t, b, "c_new", &sandbox.Event{Type: sandbox.TypeTurnCompleted, TurnID: "turn_1", TS: t0,
		Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn}})
	if _, err := b.Turn(ctx, "c_new", "turn_1"); err != nil {
		t.Fatalf("turn read while the replica lags: %v", err)
	}
	if _, err := b.Config(ctx, "c_new"); err != nil {
		t.Fatalf("config read while the replica lags: %v", err)
	}
	if _, rev, err := natsstore.GetKey(b, "state.c_new"); err != nil || rev == 0 {
		t.Fatalf("the state from the leader: revision %d, %v", rev, err)
	}

	kv, err := js.KeyValue(ctx, natsstore.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "probe.deleted", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "probe.deleted"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"probe.deleted", "probe.never"} {
		if _, _, err := natsstore.GetKey(b, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s: err = %v, want not found", key, err)
		}
	}
	if _, err := kv.Put(ctx, "probe.live", []byte("live")); err != nil {
		t.Fatal(err)
	}
	if v, _, err := natsstore.GetKey(b, "probe.live"); err != nil || string(v) != "live" {
		t.Fatalf("probe.live = %q, %v", v, err)
	}
	// A bucket opened for the cluster reads the same way: a node that just
	// registered is found.
	nodes, err := b.Bucket(ctx, jetstream.KeyValueConfig{Bucket: "lagging-nodes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := js.KeyValue(ctx, "lagging-nodes")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "node-a", []byte("alive")); err != nil {
		t.Fatal(err)
	}
	if kve, err := nodes.Get(ctx, "node-a"); err != nil || string(kve.Value()) != "alive" {
		t.Fatalf("a key of a cluster bucket, read while the replica lags: %v", err)
	}
	if _, err := nodes.Get(ctx, "node-b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a key never written: %v, want not found", err)
	}
	if err := b.Drop(ctx, "c_new"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Config(ctx, "c_new"); !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("config of a dropped sandbox: %v, want not_found", err)
	}
}

// TestLaggingLog: a batched direct get of the log may be answered by a
// replica that has not stored its newest events yet, and says nothing more
// is pending. A read the state says should reach further asks the leader
// for the rest: every page is whole, up to the last event.
func TestLaggingLog(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	var want []uint64
	for i := range 6 {
		want = append(want, mustAppend(t, s, "c_1", textEvent(fmt.Sprintf("e%d", i)))...)
	}
	natsstore.SetLaggingLog(s, func(msgs []*nats.Msg) []*nats.Msg { return msgs[:max(0, len(msgs)-2)] })
	defer natsstore.SetLaggingLog(s, nil)
	read := func(after uint64, limit int) []uint64 {
		t.Helper()
		recs, err := s.Read(ctx, "c_1", after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if got := read(0, 100); !slices.Equal(got, want) {
		t.Fatalf("read from the start = %v, want %v", got, want)
	}
	if got := read(0, 3); !slices.Equal(got, want[:3]) {
		t.Fatalf("a page of 3 = %v, want %v", got, want[:3])
	}
	if got := read(want[3], 100); !slices.Equal(got, want[4:]) {
		t.Fatalf("the last two = %v, want %v", got, want[4:])
	}
	if got := read(want[5], 100); len(got) != 0 {
		t.Fatalf("after the last = %v, want none", got)
	}
}
