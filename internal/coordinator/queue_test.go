package coordinator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// turnLife lists the turn.* events of evs as "type turn_id" lines, and
// turn_id "completed:status" for turn.completed.
func turnLife(evs []sandbox.Event) []string {
	var out []string
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case *sandbox.TurnQueuedData:
			out = append(out, fmt.Sprintf("queued %s %d", ev.TurnID, d.Position))
		case *sandbox.TurnStarted:
			out = append(out, "started "+ev.TurnID)
		case *sandbox.TurnCompleted:
			out = append(out, "completed "+ev.TurnID+" "+d.Status)
		}
	}
	return out
}

// completedTurn waits for turn id's turn.completed.
func completedTurn(id string) func(sandbox.Event) bool {
	return func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == id }
}

// startHang starts a turn that runs until it is canceled, and waits until
// it runs.
func (e *env) startHang(id string) sandbox.Turn {
	e.t.Helper()
	turn, err := e.co.StartTurn(context.Background(), id, "hang after one chunk")
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(id, 0, isType(sandbox.TypeMessageUpdated))
	return turn
}

func (e *env) queue(id, input string) sandbox.Turn {
	e.t.Helper()
	turn, err := e.co.QueueTurn(context.Background(), id, input)
	if err != nil {
		e.t.Fatal(err)
	}
	if turn.Status != sandbox.TurnQueued {
		e.t.Fatalf("queued turn %+v, want status queued", turn)
	}
	return turn
}

// TestQueuedTurns: turns queued behind a running one start in order once
// it ends (here canceled), each with its own turn.started and
// turn.completed; the queue holds 16 at most; a queued turn canceled ends
// without running; the sandbox and GET of a turn show what waits.
func TestQueuedTurns(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(sandbox.CreateParams{})
	hang := e.startHang(sb.ID)
	first := e.queue(sb.ID, "hello first")
	second := e.queue(sb.ID, "hello second")

	t.Run("ErrTurnInProgress", func(t *testing.T) {
		_, err := e.co.StartTurn(ctx, sb.ID, "not queued")
		if got, want := sandbox.ErrorType(err), sandbox.ETurnInProgress; got != want {
			t.Fatalf("turn without queue: %v, want %s", err, want)
		}
	})
	var extra []sandbox.Turn
	t.Run("Limit", func(t *testing.T) {
		for i := 3; i <= 16; i++ {
			extra = append(extra, e.queue(sb.ID, fmt.Sprintf("hello %d", i)))
		}
		_, err := e.co.QueueTurn(ctx, sb.ID, "one too many")
		if got, want := sandbox.ErrorType(err), sandbox.EConflict; got != want || !strings.Contains(err.Error(), "16") {
			t.Fatalf("17th queued turn: %v, want %s naming the limit", err, want)
		}
	})
	t.Run("CancelQueued", func(t *testing.T) {
		for _, q := range extra {
			got, err := e.co.CancelTurn(ctx, sb.ID, q.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != sandbox.TurnCanceled || got.CompletedAt == nil {
				t.Fatalf("canceled queued turn = %+v", got)
			}
		}
	})
	cur, err := e.store.Sandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, q := range cur.QueuedTurns {
		ids = append(ids, q.ID)
	}
	if want := []string{first.ID, second.ID}; !slices.Equal(ids, want) {
		t.Fatalf("queued_turns %v, want %v", ids, want)
	}
	if got, err := e.co.Turn(ctx, sb.ID, second.ID); err != nil || got.Status != sandbox.TurnQueued {
		t.Fatalf("GET queued turn = %+v, %v", got, err)
	}

	if _, err := e.co.CancelTurn(ctx, sb.ID, hang.ID); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, completedTurn(second.ID))
	want := []string{"started " + hang.ID, "queued " + first.ID + " 1", "queued " + second.ID + " 2"}
	for i, q := range extra {
		want = append(want, fmt.Sprintf("queued %s %d", q.ID, i+3))
	}
	for _, q := range extra {
		want = append(want, "completed "+q.ID+" canceled")
	}
	want = append(want, "completed "+hang.ID+" canceled",
		"started "+first.ID, "completed "+first.ID+" succeeded",
		"started "+second.ID, "completed "+second.ID+" succeeded")
	if got := turnLife(evs); !slices.Equal(got, want) {
		t.Fatalf("turns:\ngot  %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	if got, err := e.co.Turn(ctx, sb.ID, first.ID); err != nil || got.Status != sandbox.TurnSucceeded || !got.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("GET first turn = %+v, %v; want succeeded, created when queued", got, err)
	}
	if cur, _ := e.store.Sandbox(ctx, sb.ID); len(cur.QueuedTurns) != 0 || cur.CurrentTurn != nil {
		t.Fatalf("sandbox after the queue ran: current %+v, queued %+v", cur.CurrentTurn, cur.QueuedTurns)
	}
}

// TestQueuedAfterFailure: a turn that fails (here by its timeout, which
// stops the agent) does not drop the queue: the next turn boots the agent
// again and runs.
func TestQueuedAfterFailure(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.TurnTimeout = 2 * time.Second })
	sb := e.create(sandbox.CreateParams{})
	hang := e.startHang(sb.ID)
	next := e.queue(sb.ID, "hello")
	evs := e.waitFor(sb.ID, 0, completedTurn(next.ID))
	want := []string{"started " + hang.ID, "queued " + next.ID + " 1", "completed " + hang.ID + " failed",
		"started " + next.ID, "completed " + next.ID + " succeeded"}
	if got := turnLife(evs); !slices.Equal(got, want) {
		t.Fatalf("turns:\ngot  %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// TestQueuedTurnsEnd: deleting the sandbox completes its queued turns
// canceled, and so does a server that stops, saying so.
func TestQueuedTurnsEnd(t *testing.T) {
	t.Run("Delete", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		e.startHang(sb.ID)
		q := e.queue(sb.ID, "hello")
		got, err := e.co.DeleteSandbox(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.QueuedTurns) != 0 {
			t.Fatalf("deleted sandbox still queues %+v", got.QueuedTurns)
		}
		evs := e.waitFor(sb.ID, 0, completedTurn(q.ID))
		if c := completed(evs[len(evs)-1:]); c.Status != sandbox.TurnCanceled {
			t.Fatalf("queued turn's turn.completed = %+v", c)
		}
	})
	t.Run("Shutdown", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		e.startHang(sb.ID)
		q := e.queue(sb.ID, "hello")
		e.co.Close()
		got, err := e.store.Turn(context.Background(), sb.ID, q.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.TurnCanceled {
			t.Fatalf("queued turn after the server stopped = %+v", got)
		}
		evs, err := e.store.Read(context.Background(), sb.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := evs[len(evs)-1].Decode()
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := ev.Data.(*sandbox.TurnCompleted); !ok || ev.TurnID != q.ID || c.Error == nil || c.Error.Code != sandbox.ErrServerStopped {
			t.Fatalf("last event %s %s %+v, want the queued turn's turn.completed with server_stopped", ev.Type, ev.TurnID, ev.Data)
		}
	})
}

// TestQueuedTurnsRestart: a restart does not run what was queued: recovery
// completes the queued turns failed with coordinator_restarted, without a
// turn.started, after the turn that ran.
func TestQueuedTurnsRestart(t *testing.T) {
	e, crash := newCrashEnv(t)
	sb := e.create(sandbox.CreateParams{})
	hang := e.startHang(sb.ID)
	first, second := e.queue(sb.ID, "hello first"), e.queue(sb.ID, "hello second")
	e2 := crash()
	co2 := e2.co
	if got, _ := e2.store.Sandbox(context.Background(), sb.ID); len(got.QueuedTurns) != 2 {
		t.Fatalf("before recovery the log keeps %d queued turns, want 2", len(got.QueuedTurns))
	}
	if err := co2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := e2.waitFor(sb.ID, 0, completedTurn(second.ID))
	want := []string{"started " + hang.ID, "queued " + first.ID + " 1", "queued " + second.ID + " 2",
		"completed " + hang.ID + " failed", "completed " + first.ID + " failed", "completed " + second.ID + " failed"}
	if got := turnLife(evs); !slices.Equal(got, want) {
		t.Fatalf("turns:\ngot  %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	for _, q := range []sandbox.Turn{first, second} {
		got, err := co2.Turn(context.Background(), sb.ID, q.ID)
		if err != nil || got.Status != sandbox.TurnFailed {
			t.Fatalf("queued turn after restart = %+v, %v", got, err)
		}
	}
	if c := completed(evs[len(evs)-1:]); c.Error == nil || c.Error.Code != sandbox.ErrCoordinatorRestarted {
		t.Fatalf("queued turn's turn.completed = %+v", c)
	}
	if got, _ := e2.store.Sandbox(context.Background(), sb.ID); len(got.QueuedTurns) != 0 || got.CurrentTurn != nil {
		t.Fatalf("sandbox after recovery: current %+v, queued %+v", got.CurrentTurn, got.QueuedTurns)
	}
}

// newCrashEnv is an env whose process can die: crash cuts its store under
// its coordinator, so nothing more reaches the file, and opens a new
// coordinator on the same file, not yet recovered.
func newCrashEnv(t *testing.T) (e *env, crash func() *env) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sparkles.db")
	cfg := coordinator.Config{DataDir: dir, Agents: registry.Registry{"demo": demoAgent()}, FlushInterval: 5 * time.Millisecond}
	open := func() *env {
		cfg.Store = bolttest.MustOpenAt(t, path, boltstore.Options{})
		co, err := coordinator.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return &env{t: t, store: cfg.Store.(*boltstore.Store), co: co, cfg: cfg, dir: dir}
	}
	e = open()
	return e, func() *env {
		e.store.Close()
		e.co.Close()
		next := open()
		t.Cleanup(func() {
			next.co.Close()
			next.store.Close()
		})
		return next
	}
}
