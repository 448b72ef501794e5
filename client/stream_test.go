package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// fast keeps reconnections quick in tests.
var fast = client.StreamOptions{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}

func withSince(o client.StreamOptions, since uint64) client.StreamOptions {
	o.Since = client.Since(since)
	return o
}

// logIDs pages the whole retained log of a sandbox.
func logIDs(t *testing.T, c *client.Client, id string) []uint64 {
	t.Helper()
	ctx := testContext(t)
	var ids []uint64
	since := uint64(0)
	for {
		page, err := c.Events(ctx, id, since, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			ids = append(ids, ev.ID)
		}
		if !page.HasMore {
			return ids
		}
		since = page.NextSince
	}
}

func equalIDs(t *testing.T, got, want []uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("delivered %d events %v, log has %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d: delivered id %d, log has %d (delivered %v, log %v)", i, got[i], want[i], got, want)
		}
	}
}

func TestStreamLive(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stream(ctx, sb.ID, fast)
	defer s.Close()

	first, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := first.Kind, client.KindSnapshot; got != want {
		t.Fatalf("first message is a %v, want a %v", got, want)
	}
	snap, ok := s.Snapshot()
	if !ok || snap.Sandbox.ID != sb.ID {
		t.Fatalf("Snapshot() = %+v, %v", snap.Sandbox, ok)
	}
	from := uint64(snap.LastEventID)
	turn, err := c.StartTurn(ctx, sb.ID, "read README.md")
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for m, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != client.KindEvent {
			continue
		}
		if len(m.Raw) == 0 {
			t.Fatalf("event %d without its raw envelope", m.Event.ID)
		}
		ids = append(ids, m.Event.ID)
		if d, ok := m.Event.Data.(*sandbox.TurnCompleted); ok && m.Event.TurnID == turn.ID {
			if got, want := d.Status, sandbox.TurnSucceeded; got != want {
				t.Fatalf("turn %s", got)
			}
			break
		}
	}
	var want []uint64
	for _, id := range logIDs(t, c, sb.ID) {
		if id > from {
			want = append(want, id)
		}
	}
	equalIDs(t, ids, want)
	if got, want := s.LastEventID(), ids[len(ids)-1]; got != want {
		t.Fatalf("LastEventID = %d, want %d", got, want)
	}
}

// TestStreamRestart stops the server in the middle of a turn, lets the
// reader see connections refused, starts a new server on the same store
// and port, and checks that what the reader delivered is the log: every
// event, in order, none twice.
func TestStreamRestart(t *testing.T) {
	ctx := testContext(t)
	// The stream is compared with the log at the end: no compaction of the
	// finished turn's superseded snapshots may take events out between.
	srv := sparklestest.Start(t, sparklestest.WithoutRetention())
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	refused := make(chan struct{})
	var once sync.Once
	opts := withSince(fast, 0)
	opts.OnRetry = func(err error, _ time.Duration) {
		if client.IsUnreachable(err) {
			once.Do(func() { close(refused) })
		}
	}
	s := c.Stream(ctx, sb.ID, opts)
	defer s.Close()

	type delivered struct {
		ev  sandbox.Event
		err error
	}
	msgs := make(chan delivered, 1024)
	go func() {
		for m, err := range s.Events() {
			if err != nil {
				msgs <- delivered{err: err}
				return
			}
			if m.Kind == client.KindEvent {
				msgs <- delivered{ev: m.Event}
			}
		}
	}()
	var ids []uint64
	next := func() sandbox.Event {
		t.Helper()
		select {
		case d := <-msgs:
			if d.err != nil {
				t.Fatalf("stream ended: %v", d.err)
			}
			ids = append(ids, d.ev.ID)
			return d.ev
		case <-ctx.Done():
			t.Fatalf("no event: %v (delivered %v)", ctx.Err(), ids)
		}
		panic("unreachable")
	}

	slow, err := c.StartTurn(ctx, sb.ID, "slow")
	if err != nil {
		t.Fatal(err)
	}
	// Stop while the turn streams its reply.
	for {
		if d, ok := next().Data.(*sandbox.MessageUpdated); ok && d.Kind == sandbox.PartText {
			break
		}
	}
	srv.Stop()
	t.Logf("server stopped after %d events", len(ids))
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("the reader never saw the server gone")
	}
	srv.Restart()

	// The stopped turn was completed by the shutdown or by the restart;
	// a new turn runs on the new server.
	for ev := next(); ev.Type != sandbox.TypeTurnCompleted || ev.TurnID != slow.ID; ev = next() {
	}
	t.Logf("the interrupted turn ended at event %d", ids[len(ids)-1])
	turn, err := c.StartTurn(ctx, sb.ID, "read README.md")
	if err != nil {
		t.Fatal(err)
	}
	for ev := next(); ev.Type != sandbox.TypeTurnCompleted || ev.TurnID != turn.ID; ev = next() {
	}
	equalIDs(t, ids, logIDs(t, c, sb.ID))
}

// TestStreamPruned starts a reader at a cursor that retention has passed:
// it reports the gap, delivers what is retained after it, then follows.
func TestStreamPruned(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.StartTurn(ctx, sb.ID, "read README.md")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, sb.ID, turn.ID, 0, nil)
	all := logIDs(t, c, sb.ID)
	if len(all) < 5 {
		t.Fatalf("log of %d events; the test needs 5", len(all))
	}
	srv.Prune(sb.ID, all[2])

	s := c.Stream(ctx, sb.ID, withSince(fast, all[0]))
	defer s.Close()
	m, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Kind, client.KindGap; got != want {
		t.Fatalf("first message is a %v, want a %v", got, want)
	}
	if got, want := m.Gap, (client.Gap{From: all[0] + 1, To: all[2]}); got != want {
		t.Fatalf("gap = %+v, want %+v", got, want)
	}
	var ids []uint64
	for len(ids) < len(all)-3 {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind == client.KindEvent {
			ids = append(ids, m.Event.ID)
		}
	}
	equalIDs(t, ids, all[3:])

	// The stream goes on live after the pages.
	turn, err = c.StartTurn(ctx, sb.ID, "read README.md")
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind == client.KindGap {
			t.Fatalf("second gap %+v", m.Gap)
		}
		if m.Kind == client.KindEvent {
			ids = append(ids, m.Event.ID)
			if m.Event.Type == sandbox.TypeTurnCompleted && m.Event.TurnID == turn.ID {
				break
			}
		}
	}
	equalIDs(t, ids, logIDs(t, c, sb.ID))
}

func TestStreamEnds(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(s *client.Stream) error {
		t.Helper()
		defer s.Close()
		for {
			if _, err := s.Next(ctx); err != nil {
				return err
			}
		}
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		err := next(srv.Client.Stream(ctx, "c_nosuchsandbox", fast))
		wantType(t, err, sandbox.ENotFound, 404)
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		err := next(client.New(srv.URL, "wrong").Stream(ctx, sb.ID, fast))
		wantType(t, err, sandbox.EUnauthorized, 401)
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		err := next(srv.Client.Stream(ctx, sb.ID, withSince(fast, 1<<40)))
		wantType(t, err, sandbox.ECursorStale, 410)
	})
	t.Run("Close", func(t *testing.T) {
		s := srv.Client.Stream(ctx, sb.ID, fast)
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after Close = %v, want context.Canceled", err)
		}
	})
	t.Run("StreamToken", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s := client.New(srv.URL, sb.StreamToken).Stream(sctx, sb.ID, fast)
		defer s.Close()
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Kind, client.KindSnapshot; got != want {
			t.Fatalf("first message is a %v, want a %v", got, want)
		}
	})
}
