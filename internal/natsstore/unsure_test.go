package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// restartable is a NATS server that a test stops and starts again on the
// same port and directory: its clients reconnect, and what it
// acknowledged is still there.
type restartable struct {
	t    *testing.T
	dir  string
	port int
	url  string
	stop func()
}

func runRestartable(t *testing.T) *restartable {
	r := &restartable{t: t, dir: t.TempDir()}
	r.url, r.stop = natstest.RunServerConfig(t, natstest.Config{Dir: r.dir})
	u, err := url.Parse(r.url)
	if err != nil {
		t.Fatal(err)
	}
	if r.port, err = strconv.Atoi(u.Port()); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *restartable) start() {
	_, r.stop = natstest.RunServerConfig(r.t, natstest.Config{Dir: r.dir, Port: r.port})
}

// waitReachable waits until s has found NATS answering again.
func waitReachable(t *testing.T, s *natsstore.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.Unreachable() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the store does not find NATS back")
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// streamSeqs returns the sequences of the messages in the log of sandbox
// id after after, as the stream holds them, whatever its state says.
func streamSeqs(t *testing.T, url, id string, after uint64) []uint64 {
	t.Helper()
	ctx := context.Background()
	stream, err := natstest.JetStream(t, url).Stream(ctx, natsstore.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	subject := natsstore.DefaultSubjectPrefix + "." + id
	var seqs []uint64
	for {
		msg, err := stream.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seqs
		}
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, msg.Sequence)
		after = msg.Sequence
	}
}

// logTypes returns the types of the events in the log of sandbox id.
func logTypes(t *testing.T, s *natsstore.Store, id string) []sandbox.Type {
	t.Helper()
	recs, err := s.Read(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	types := make([]sandbox.Type, len(recs))
	for i, r := range recs {
		types[i] = r.Type
	}
	return types
}

// TestUnsureRetry: an append whose events landed but which failed with an
// unknown outcome (its acknowledgement lost in an outage, or its state not
// stored) is made again by the coordinator, the very same events. They
// land once: the retry gets the ids they have, folds them once, runs its
// mutate, and the log goes on after them. Another batch in between is not
// taken for it, nor is a write with no events.
func TestUnsureRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail sets hooks on s that make the next append's events land and
		// the append fail, by stopping the server at the right moment.
		fail func(s *natsstore.Store, stop func())
	}{
		{"NoAcknowledgement", func(s *natsstore.Store, stop func()) {
			first := true
			natsstore.SetPublishHook(s, func(do func() ([]uint64, error)) ([]uint64, error) {
				if !first {
					return do()
				}
				first = false
				if _, err := do(); err != nil {
					return nil, err
				}
				stop() // the acknowledgement came; the writer never learns of it
				return nil, fmt.Errorf("no acknowledgement: %w", context.DeadlineExceeded)
			})
		}},
		{"StateNotStored", func(s *natsstore.Store, stop func()) {
			first := true
			natsstore.SetHooks(s, nil, func(string) {
				if first {
					first = false
					stop()
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, between := range []string{"", "AnotherBatch", "MutateOnly"} {
				t.Run("Between"+between, func(t *testing.T) {
					testUnsureRetry(t, tc.fail, between)
				})
			}
		})
	}
}

func testUnsureRetry(t *testing.T, fail func(*natsstore.Store, func()), between string) {
	ctx := context.Background()
	srv := runRestartable(t)
	s, err := natsstore.Open(ctx, srv.url, natsstore.Options{Logger: slog.New(slog.DiscardHandler),
		NATSOptions: []nats.Option{nats.ReconnectWait(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCreate(t, s, "c_1")
	const turn = "turn_1"
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: turn, TS: t0,
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}})
	before := readIDs(t, s, "c_1")

	evs := []*sandbox.Event{
		{Type: sandbox.TypeMessageUpdated, TurnID: turn, TS: t0.Add(time.Second),
			Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "done"}},
		{Type: sandbox.TypeTurnCompleted, TurnID: turn, TS: t0.Add(2 * time.Second),
			Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: "end_turn"}},
	}
	mutated := 0
	mutate := func(st *sandbox.State) error {
		mutated++
		st.Sandbox.StatusDetail = "retried"
		return nil
	}
	fail(s, srv.stop)
	err = s.Append(ctx, "c_1", evs, mutate)
	wantUnavailable(t, "an append that lost its answer to an outage", err, "the event store cannot take writes")
	natsstore.SetHooks(s, nil, nil)
	srv.start()
	waitReachable(t, s)
	landed := append(slices.Clone(before), streamSeqs(t, srv.url, "c_1", before[len(before)-1])...)
	if len(landed) != len(before)+len(evs) {
		t.Fatalf("stream %v after the failed append, want its %d events once each after %v",
			landed, len(evs), before)
	}

	var other []uint64
	switch between {
	case "AnotherBatch":
		// Not the same events: appended in full, after those that landed.
		other = mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeMessageUpdated, TurnID: turn, TS: t0.Add(time.Second),
			Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "other"}})
		if other[0] <= landed[len(landed)-1] {
			t.Fatalf("another batch got id %d, want one after %v", other[0], landed)
		}
	case "MutateOnly":
		if err := s.Append(ctx, "c_1", nil, func(*sandbox.State) error { return nil }); err != nil {
			t.Fatalf("a write with no events after the failed append: %v", err)
		}
	}

	mutated = 0
	if err := s.Append(ctx, "c_1", evs, mutate); err != nil {
		t.Fatalf("the same events appended again: %v", err)
	}
	if got := []uint64{evs[0].ID, evs[1].ID}; !slices.Equal(got, landed[len(before):]) {
		t.Fatalf("the retry got ids %v, want those its events have in the log, %v", got, landed[len(before):])
	}
	if mutated != 1 {
		t.Fatalf("the retry ran its mutate %d times, want once", mutated)
	}
	next := mustAppend(t, s, "c_1", textEvent("after"))

	want := append(slices.Clone(landed), other...)
	want = append(want, next...)
	if got := readIDs(t, s, "c_1"); !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v: each event once, and the next append after them", got, want)
	}
	completed := 0
	for _, typ := range logTypes(t, s, "c_1") {
		if typ == sandbox.TypeTurnCompleted {
			completed++
		}
	}
	if completed != 1 {
		t.Fatalf("%d turn.completed in the log, want 1", completed)
	}
	st, err := s.State(ctx, "c_1")
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Sandbox.LastEventID) != next[0] || st.Sandbox.CurrentTurn != nil || st.Sandbox.StatusDetail != "retried" {
		t.Fatalf("state %s, want last_event_id %d, no current turn and the mutate's status_detail", jsonOf(t, st.Sandbox), next[0])
	}
	tr, err := s.Turn(ctx, "c_1", turn)
	if err != nil || tr.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn %+v, %v: want succeeded", tr, err)
	}
	// The state counts the bytes of each event it folded: an event folded
	// twice, or one in the log it never folded, shows here.
	if err := s.Check(); err != nil {
		t.Fatalf("the state disagrees with the log: %v", err)
	}
}
