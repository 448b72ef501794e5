package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/floodagent"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestLogBytesBound: an agent floods its turns with tool calls of 100
// locations of 4 KiB each, as the one that filled a disk with its log did,
// against a bound of 4 MiB and a retention interval of an hour: the log
// stays within the bound by the passes its growth asks for, whole turns go
// first, a stream resuming inside them gets 410 cursor_pruned, and a turn
// that alone outgrows the bound fails with log_full, its end kept.
func TestLogBytesBound(t *testing.T) {
	const bound = 4 << 20
	srv := sparklestest.Start(t,
		sparklestest.WithBuiltinAgent("flood", floodagent.Run),
		sparklestest.WithDefaultAgent("flood"),
		sparklestest.WithRetention(retention.Config{MaxBytes: bound, Interval: time.Hour}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// poll asks until ok; the server has no event for what these wait on
	// (a turn's end by GetTurn, a retention pass), so it asks every 20 ms.
	poll := func(what string, ok func() bool) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !ok() {
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("%s: not within the deadline", what)
			}
		}
	}
	turn := func(input string) sandbox.Turn {
		t.Helper()
		started, err := c.StartTurn(ctx, sb.ID, input)
		if err != nil {
			t.Fatal(err)
		}
		var got sandbox.Turn
		poll("turn "+input, func() bool {
			if got, err = c.GetTurn(ctx, sb.ID, started.ID); err != nil {
				t.Fatal(err)
			}
			return got.Done()
		})
		return got
	}
	// log reads the retained log through the JSON pages, and its bytes.
	log := func() (evs []sandbox.Event, size int) {
		t.Helper()
		for since := uint64(0); ; {
			page, err := c.Events(ctx, sb.ID, since, 1000)
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, page.Events...)
			for _, raw := range page.Raw {
				size += len(raw)
			}
			if !page.HasMore {
				return evs, size
			}
			since = page.NextSince
		}
	}

	first := turn("tools 4 4096")
	evs, _ := log()
	inside := evs[1].ID // a tool call of the first turn
	if evs[1].TurnID != first.ID {
		t.Fatalf("event %d is of turn %q, want %s", inside, evs[1].TurnID, first.ID)
	}
	t.Run("FinishedTurnsPruned", func(t *testing.T) {
		// Three turns of 1.6 MiB pass the bound of 4 MiB.
		for range 2 {
			if got := turn("tools 4 4096"); got.Status != sandbox.TurnSucceeded {
				t.Fatalf("turn %s, want succeeded", got.Status)
			}
		}
		poll("a pass pruning the first turn", func() bool {
			got, err := c.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			return uint64(got.PrunedThrough) >= inside
		})
		evs, size := log()
		if size > bound {
			t.Fatalf("the log holds %d bytes, over its bound of %d", size, bound)
		}
		if evs[0].Type != sandbox.TypeTurnStarted {
			t.Fatalf("the log begins with a %s: a turn was cut", evs[0].Type)
		}
		for _, ev := range evs {
			if ev.TurnID == first.ID {
				t.Fatalf("event %d of the first turn is still retained", ev.ID)
			}
		}
	})
	t.Run("ErrCursorPruned", func(t *testing.T) {
		cursor := inside
		_, err := openStream(ctx, http.DefaultClient, srv.URL, srv.Token, sb.ID, &cursor)
		var se *statusError
		if !errors.As(err, &se) || se.status != http.StatusGone {
			t.Fatalf("stream from a pruned cursor: %v, want 410", err)
		}
		var body struct {
			Error struct {
				Type          string      `json:"type"`
				OldestEventID sandbox.Seq `json:"oldest_event_id"`
				PrunedThrough sandbox.Seq `json:"pruned_through"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(se.body), &body); err != nil {
			t.Fatal(err)
		}
		if e := body.Error; e.Type != sandbox.ECursorPruned || uint64(e.PrunedThrough) < inside || e.OldestEventID <= e.PrunedThrough {
			t.Fatalf("410 body %s", se.body)
		}
	})
	t.Run("TurnPastTheBoundFails", func(t *testing.T) {
		got := turn("tools 0 4096")
		if got.Status != sandbox.TurnFailed || got.StopReason == nil || *got.StopReason != sandbox.StopError {
			t.Fatalf("the flooding turn ended %s, want failed with stop_reason error", mustJSONString(t, got))
		}
		// Its stop asks for a pass, which cuts into the turn (larger than
		// the bound on its own) and keeps its end.
		var evs []sandbox.Event
		var size int
		poll("a pass cutting into the failed turn", func() bool {
			evs, size = log()
			return len(evs) > 0 && evs[0].TurnID == got.ID && evs[0].Type != sandbox.TypeTurnStarted
		})
		if size > bound {
			t.Fatalf("the log holds %d bytes, over its bound of %d", size, bound)
		}
		end := evs[len(evs)-2:]
		if end[0].Type != sandbox.TypeSandboxError || end[0].Data.(*sandbox.SandboxError).Code != sandbox.ErrLogFull ||
			end[1].Type != sandbox.TypeTurnCompleted || end[1].TurnID != got.ID {
			t.Fatalf("the log ends with %s, %s; want the turn's sandbox.error log_full and turn.completed", end[0].Type, end[1].Type)
		}
		if d := end[1].Data.(*sandbox.TurnCompleted); d.Error == nil || d.Error.Code != sandbox.ErrLogFull {
			t.Fatalf("turn.completed error = %+v, want log_full", d.Error)
		}
	})
}

func mustJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
