package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantType fails the test unless err is an API error of type typ with the
// given status, and checks that errors.Is agrees with IsType.
func wantType(t *testing.T, err error, typ string, status int) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *client.Error of type %s", err, err, typ)
	}
	if got, want := e.Type, typ; got != want {
		t.Fatalf("error type = %q (%v), want %q", got, err, want)
	}
	if got, want := e.Status, status; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if !client.IsType(err, typ) {
		t.Fatalf("IsType(%v, %q) = false", err, typ)
	}
	if !errors.Is(err, &client.Error{Type: typ}) {
		t.Fatalf("errors.Is(%v, &Error{Type: %q}) = false", err, typ)
	}
	if e.Message == "" {
		t.Fatal("error without a message")
	}
	return e
}

// waitTurn follows sandbox id from cursor until turn turnID completes and
// returns its events. decide, when set, answers each approval.
func waitTurn(t *testing.T, c *client.Client, id, turnID string, since uint64, decide func(*sandbox.ApprovalRequested)) []sandbox.Event {
	t.Helper()
	ctx := testContext(t)
	s := c.Stream(ctx, id, client.StreamOptions{Since: client.Since(since)})
	defer s.Close()
	var evs []sandbox.Event
	for {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("stream of %s: %v (events so far: %d)", id, err, len(evs))
		}
		if m.Kind != client.KindEvent || m.Event.TurnID != turnID {
			continue
		}
		evs = append(evs, m.Event)
		switch d := m.Event.Data.(type) {
		case *sandbox.ApprovalRequested:
			if decide != nil {
				decide(d)
			}
		case *sandbox.TurnCompleted:
			return evs
		}
	}
}

// find returns the data of the first event of evs with data type T.
func find[T any](t *testing.T, evs []sandbox.Event) *T {
	t.Helper()
	for _, ev := range evs {
		if d, ok := ev.Data.(*T); ok {
			return d
		}
	}
	var zero T
	t.Fatalf("no %T among %d events", &zero, len(evs))
	return nil
}

func TestHealthz(t *testing.T) {
	ctx := testContext(t)
	t.Run("OK", func(t *testing.T) {
		srv := sparklestest.Start(t)
		if err := client.New(srv.URL, "").Healthz(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ErrUnreachable", func(t *testing.T) {
		// A port that was just free: nothing listens there.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String()
		l.Close()
		err = client.New(url, "x").Healthz(ctx)
		if !client.IsUnreachable(err) {
			t.Fatalf("err = %v (%T), want an *UnreachableError", err, err)
		}
		if got := err.Error(); !strings.Contains(got, url) {
			t.Fatalf("error %q does not name the URL %s", got, url)
		}
		if client.IsType(err, sandbox.EInternal) {
			t.Fatal("an unreachable server is not an API error")
		}
	})
}

func TestSandboxes(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client

	var created []client.CreatedSandbox
	t.Run("CreateOK", func(t *testing.T) {
		for i := range 3 {
			sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
				Env:      map[string]string{"MODE": "test"},
				Secrets:  map[string]string{"API_KEY": "sk-secret-value"},
				Metadata: map[string]string{"n": string(rune('a' + i))},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(sb.ID, sandbox.PrefixSandbox) {
				t.Fatalf("id = %q, want prefix %q", sb.ID, sandbox.PrefixSandbox)
			}
			if sb.StreamToken == "" {
				t.Fatal("no stream_token in the create answer")
			}
			if got, want := sb.Agent, "demo"; got != want {
				t.Fatalf("agent = %q, want %q", got, want)
			}
			if got, want := sb.Metadata["n"], string(rune('a'+i)); got != want {
				t.Fatalf("metadata n = %q, want %q", got, want)
			}
			created = append(created, sb)
		}
	})
	t.Run("CreateErrInvalidRequest", func(t *testing.T) {
		_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Agent: "no-such-agent"})
		wantType(t, err, sandbox.EInvalidRequest, 400)
	})
	t.Run("ListOK", func(t *testing.T) {
		page, err := c.ListSandboxes(ctx, client.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(page.Data), 2; got != want {
			t.Fatalf("page of %d, want %d", got, want)
		}
		if !page.HasMore {
			t.Fatal("has_more = false on the first of two pages")
		}
		next, err := c.ListSandboxes(ctx, client.ListOptions{Limit: 2, After: page.Data[1].ID})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(next.Data), 1; got != want || next.HasMore {
			t.Fatalf("second page of %d (has_more %v), want %d", got, next.HasMore, want)
		}
		var ids []string
		for sb, err := range c.Sandboxes(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sb.ID)
		}
		if got, want := strings.Join(ids, ","), created[0].ID+","+created[1].ID+","+created[2].ID; got != want {
			t.Fatalf("Sandboxes = %s, want %s", got, want)
		}
	})
	t.Run("ListErrInvalidRequest", func(t *testing.T) {
		_, err := c.ListSandboxes(ctx, client.ListOptions{Limit: 100000})
		wantType(t, err, sandbox.EInvalidRequest, 400)
	})
	t.Run("GetOK", func(t *testing.T) {
		sb, err := c.GetSandbox(ctx, created[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sb.ID, created[0].ID; got != want {
			t.Fatalf("id = %q, want %q", got, want)
		}
	})
	t.Run("GetErrNotFound", func(t *testing.T) {
		_, err := c.GetSandbox(ctx, "c_nosuchsandbox")
		wantType(t, err, sandbox.ENotFound, 404)
		if !errors.Is(err, client.ErrNotFound) {
			t.Fatal("errors.Is(err, ErrNotFound) = false")
		}
		if errors.Is(err, client.ErrConflict) {
			t.Fatal("errors.Is(not_found, ErrConflict) = true")
		}
	})
	t.Run("DeleteOK", func(t *testing.T) {
		sb, err := c.DeleteSandbox(ctx, created[2].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sb.Status, sandbox.StatusDeleted; got != want {
			t.Fatalf("status = %q, want %q", got, want)
		}
	})
	t.Run("DeleteErrNotFound", func(t *testing.T) {
		_, err := c.DeleteSandbox(ctx, "c_nosuchsandbox")
		wantType(t, err, sandbox.ENotFound, 404)
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		_, err := client.New(srv.URL, "wrong-token").GetSandbox(ctx, created[0].ID)
		wantType(t, err, sandbox.EUnauthorized, 401)
	})
	t.Run("StreamTokenOK", func(t *testing.T) {
		reader := client.New(srv.URL, created[0].StreamToken)
		if _, err := reader.GetSandbox(ctx, created[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := reader.Events(ctx, created[0].ID, 0, 10); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("StreamTokenErrForbidden", func(t *testing.T) {
		reader := client.New(srv.URL, created[0].StreamToken)
		_, err := reader.GetSandbox(ctx, created[1].ID)
		wantType(t, err, sandbox.EForbidden, 403)
		_, err = reader.StartTurn(ctx, created[0].ID, "hello")
		wantType(t, err, sandbox.EForbidden, 403)
	})
}

func TestTurns(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("StartOK", func(t *testing.T) {
		turn, err := c.StartTurn(ctx, sb.ID, "read README.md")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(turn.ID, sandbox.PrefixTurn) {
			t.Fatalf("turn id = %q", turn.ID)
		}
		evs := waitTurn(t, c, sb.ID, turn.ID, 0, nil)
		if got, want := find[sandbox.TurnCompleted](t, evs).Status, sandbox.TurnSucceeded; got != want {
			t.Fatalf("turn status = %q, want %q", got, want)
		}
		got, err := c.GetTurn(ctx, sb.ID, turn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.TurnSucceeded || got.CompletedAt == nil {
			t.Fatalf("GetTurn = %+v, want succeeded and completed", got)
		}
	})
	t.Run("StartErrInvalidRequest", func(t *testing.T) {
		_, err := c.StartTurn(ctx, sb.ID, "  ")
		wantType(t, err, sandbox.EInvalidRequest, 400)
	})
	t.Run("StartErrPayloadTooLarge", func(t *testing.T) {
		_, err := c.StartTurn(ctx, sb.ID, strings.Repeat("x", 2<<20))
		wantType(t, err, sandbox.EPayloadTooLarge, 413)
	})
	t.Run("StartErrNotFound", func(t *testing.T) {
		_, err := c.StartTurn(ctx, "c_nosuchsandbox", "hi")
		wantType(t, err, sandbox.ENotFound, 404)
	})
	t.Run("GetErrNotFound", func(t *testing.T) {
		_, err := c.GetTurn(ctx, sb.ID, "turn_nosuchturn")
		wantType(t, err, sandbox.ENotFound, 404)
	})
	t.Run("CancelOK", func(t *testing.T) {
		cur, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		turn, err := c.StartTurn(ctx, sb.ID, "hang")
		if err != nil {
			t.Fatal(err)
		}
		t.Run("StartErrTurnInProgress", func(t *testing.T) {
			_, err := c.StartTurn(ctx, sb.ID, "another")
			wantType(t, err, sandbox.ETurnInProgress, 409)
		})
		if _, err := c.CancelTurn(ctx, sb.ID, turn.ID); err != nil {
			t.Fatal(err)
		}
		evs := waitTurn(t, c, sb.ID, turn.ID, uint64(cur.LastEventID), nil)
		if got, want := find[sandbox.TurnCompleted](t, evs).Status, sandbox.TurnCanceled; got != want {
			t.Fatalf("turn status = %q, want %q", got, want)
		}
	})
	t.Run("CancelErrNotFound", func(t *testing.T) {
		_, err := c.CancelTurn(ctx, sb.ID, "turn_nosuchturn")
		wantType(t, err, sandbox.ENotFound, 404)
	})
}

func TestApprovals(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, d client.Decision, check func(*sandbox.ApprovalRequested)) []sandbox.Event {
		t.Helper()
		cur, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		turn, err := c.StartTurn(ctx, sb.ID, "write notes.txt")
		if err != nil {
			t.Fatal(err)
		}
		return waitTurn(t, c, sb.ID, turn.ID, uint64(cur.LastEventID), func(a *sandbox.ApprovalRequested) {
			if check != nil {
				check(a)
			}
			appr, err := c.Decide(ctx, sb.ID, a.ApprovalID, d)
			if err != nil {
				t.Errorf("decide: %v", err)
				return
			}
			if got, want := appr.ID, a.ApprovalID; got != want {
				t.Errorf("approval id = %q, want %q", got, want)
			}
			_, err = c.Decide(ctx, sb.ID, a.ApprovalID, d)
			wantType(t, err, sandbox.EApprovalResolved, 409)
		})
	}
	t.Run("ApproveOK", func(t *testing.T) {
		evs := run(t, client.Approve, func(a *sandbox.ApprovalRequested) {
			_, err := c.Decide(ctx, sb.ID, a.ApprovalID, client.Decision{Decision: "maybe"})
			wantType(t, err, sandbox.EInvalidRequest, 400)
		})
		if got, want := find[sandbox.ApprovalResolved](t, evs).Decision, sandbox.DecisionApproved; got != want {
			t.Fatalf("decision = %q, want %q", got, want)
		}
	})
	t.Run("DenyOK", func(t *testing.T) {
		evs := run(t, client.Deny, nil)
		if got, want := find[sandbox.ApprovalResolved](t, evs).Decision, sandbox.DecisionDenied; got != want {
			t.Fatalf("decision = %q, want %q", got, want)
		}
	})
	t.Run("OptionOK", func(t *testing.T) {
		var opt string
		cur, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		turn, err := c.StartTurn(ctx, sb.ID, "write notes.txt")
		if err != nil {
			t.Fatal(err)
		}
		evs := waitTurn(t, c, sb.ID, turn.ID, uint64(cur.LastEventID), func(a *sandbox.ApprovalRequested) {
			for _, o := range a.Options {
				if o.Kind == sandbox.OptionAllowOnce {
					opt = o.OptionID
				}
			}
			if _, err := c.Decide(ctx, sb.ID, a.ApprovalID, client.Decision{OptionID: opt}); err != nil {
				t.Errorf("decide: %v", err)
			}
		})
		res := find[sandbox.ApprovalResolved](t, evs)
		if res.Decision != sandbox.DecisionApproved || res.OptionID != opt {
			t.Fatalf("resolved %+v, want approved with option %q", res, opt)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := c.Decide(ctx, sb.ID, "appr_nosuchapproval", client.Approve)
		wantType(t, err, sandbox.ENotFound, 404)
	})
}

func TestEvents(t *testing.T) {
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

	var all []sandbox.Event
	t.Run("OK", func(t *testing.T) {
		since := uint64(0)
		for {
			page, err := c.Events(ctx, sb.ID, since, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(page.Raw), len(page.Events); got != want {
				t.Fatalf("%d raw envelopes for %d events", got, want)
			}
			for i, ev := range page.Events {
				if ev.ID <= since {
					t.Fatalf("event %d after cursor %d", ev.ID, since)
				}
				if !strings.Contains(string(page.Raw[i]), `"id":"`+sandbox.FormatID(ev.ID)+`"`) {
					t.Fatalf("raw envelope %s is not event %d", page.Raw[i], ev.ID)
				}
				since = ev.ID
			}
			all = append(all, page.Events...)
			if got, want := page.NextSince, since; got != want {
				t.Fatalf("next_since = %d, want %d", got, want)
			}
			if !page.HasMore {
				if got, want := page.LastEventID, since; got != want {
					t.Fatalf("last_event_id = %d, want %d", got, want)
				}
				break
			}
		}
		find[sandbox.TurnStarted](t, all)
		find[sandbox.TurnCompleted](t, all)
	})
	t.Run("ErrCursorStale", func(t *testing.T) {
		_, err := c.Events(ctx, sb.ID, 1<<40, 10)
		e := wantType(t, err, sandbox.ECursorStale, 410)
		if got, want := e.LastEventID, all[len(all)-1].ID; got != want {
			t.Fatalf("410 last_event_id = %d, want %d", got, want)
		}
	})
	t.Run("ErrCursorPruned", func(t *testing.T) {
		srv.Prune(sb.ID, all[2].ID)
		_, err := c.Events(ctx, sb.ID, all[0].ID, 10)
		e := wantType(t, err, sandbox.ECursorPruned, 410)
		if got, want := e.PrunedThrough, all[2].ID; got != want {
			t.Fatalf("410 pruned_through = %d, want %d", got, want)
		}
		if got, want := e.OldestEventID, all[3].ID; got != want {
			t.Fatalf("410 oldest_event_id = %d, want %d", got, want)
		}
		page, err := c.Events(ctx, sb.ID, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := page.Events[0].ID, all[3].ID; got != want {
			t.Fatalf("first retained = %d, want %d", got, want)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := c.Events(ctx, "c_nosuchsandbox", 0, 10)
		wantType(t, err, sandbox.ENotFound, 404)
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		_, err := c.Events(ctx, sb.ID, 0, 5000)
		wantType(t, err, sandbox.EInvalidRequest, 400)
	})
}
