package sparklestest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// These tests drive the demo agent end to end over HTTP: the client API,
// the SSE stream and the JSON pages, on a real server.

type run struct {
	t      *testing.T
	ctx    context.Context
	srv    *sparklestest.Server
	sb     client.CreatedSandbox
	stream *client.Stream
}

func newRun(t *testing.T, opts ...sparklestest.Option) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	srv := sparklestest.Start(t, opts...)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	t.Cleanup(func() { st.Close() })
	return &run{t: t, ctx: ctx, srv: srv, sb: sb, stream: st}
}

// until reads durable events from the stream until one satisfies done.
func (r *run) until(done func(sandbox.Event) bool) []sandbox.Event {
	r.t.Helper()
	var out []sandbox.Event
	for {
		m, err := r.stream.Next(r.ctx)
		if err != nil {
			r.t.Fatalf("stream: %v; events so far: %s", err, kinds(out))
		}
		if m.Kind != client.KindEvent {
			continue
		}
		out = append(out, m.Event)
		if done(m.Event) {
			return out
		}
	}
}

func of(typ sandbox.Type) func(sandbox.Event) bool {
	return func(ev sandbox.Event) bool { return ev.Type == typ }
}

func kinds(evs []sandbox.Event) string {
	var s []string
	for _, ev := range evs {
		if len(s) == 0 || s[len(s)-1] != string(ev.Type) {
			s = append(s, string(ev.Type))
		}
	}
	return strings.Join(s, " ")
}

func find[T any](evs []sandbox.Event) *T {
	var out *T
	for _, ev := range evs {
		if d, ok := ev.Data.(*T); ok {
			out = d
		}
	}
	return out
}

func TestHTTPTurn(t *testing.T) {
	r := newRun(t)
	turn, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "hello")
	if err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeTurnCompleted))
	if got, want := kinds(evs), "turn.started message.updated tool.updated message.updated message.completed turn.completed"; got != want {
		t.Fatalf("event order:\ngot  %s\nwant %s", got, want)
	}
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnSucceeded || c.StopReason != sandbox.StopEndTurn {
		t.Fatalf("turn.completed = %+v", c)
	}
	got, err := r.srv.Client.GetTurn(r.ctx, r.sb.ID, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sandbox.TurnSucceeded {
		t.Fatalf("GET turn = %+v", got)
	}
}

func TestHTTPApproval(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      client.Decision
		result string
	}{
		{"Approve", client.Approve, sandbox.ToolCompleted},
		{"Deny", client.Deny, sandbox.ToolFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t)
			if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "please write notes.txt"); err != nil {
				t.Fatal(err)
			}
			evs := r.until(of(sandbox.TypeApprovalRequested))
			appr := find[sandbox.ApprovalRequested](evs)
			if _, err := r.srv.Client.Decide(r.ctx, r.sb.ID, appr.ApprovalID, tc.d); err != nil {
				t.Fatal(err)
			}
			_, err := r.srv.Client.Decide(r.ctx, r.sb.ID, appr.ApprovalID, tc.d)
			if !client.IsType(err, sandbox.EApprovalResolved) {
				t.Fatalf("second decision: %v, want approval_resolved", err)
			}
			evs = r.until(of(sandbox.TypeTurnCompleted))
			if tool := find[sandbox.ToolUpdated](evs); tool == nil || tool.Status != tc.result {
				t.Fatalf("tool = %+v, want %s", tool, tc.result)
			}
		})
	}
}

func TestHTTPCancel(t *testing.T) {
	r := newRun(t)
	turn, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "hang")
	if err != nil {
		t.Fatal(err)
	}
	r.until(of(sandbox.TypeMessageUpdated))
	if _, err := r.srv.Client.CancelTurn(r.ctx, r.sb.ID, turn.ID); err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeTurnCompleted))
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnCanceled {
		t.Fatalf("turn.completed = %+v", c)
	}
}

func TestHTTPCrash(t *testing.T) {
	r := newRun(t)
	if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "crash"); err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeTurnCompleted))
	if e := find[sandbox.SandboxError](evs); e == nil || e.Code != sandbox.ErrAgentExited {
		t.Fatalf("sandbox.error = %+v", e)
	}
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnFailed {
		t.Fatalf("turn.completed = %+v", c)
	}
}

func TestHTTPTurnTimeout(t *testing.T) {
	r := newRun(t, sparklestest.WithTurnTimeout(300*time.Millisecond))
	if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "hang"); err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeTurnCompleted))
	if e := find[sandbox.SandboxError](evs); e == nil || e.Code != sandbox.ErrTurnTimeout {
		t.Fatalf("sandbox.error = %+v", e)
	}
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnFailed || c.Error.Code != sandbox.ErrTurnTimeout {
		t.Fatalf("turn.completed = %+v", c)
	}
}

// TestHTTPRestartMidTurn stops the server while a turn runs: the graceful
// stop completes it as canceled before exit, the client resumes across the
// restart, and the next turn boots the agent again.
func TestHTTPRestartMidTurn(t *testing.T) {
	r := newRun(t)
	if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "hang"); err != nil {
		t.Fatal(err)
	}
	r.until(of(sandbox.TypeMessageUpdated))
	r.srv.Restart()
	evs := r.until(of(sandbox.TypeTurnCompleted))
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnCanceled {
		t.Fatalf("turn.completed = %+v", c)
	}
	if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "hello"); err != nil {
		t.Fatal(err)
	}
	evs = r.until(of(sandbox.TypeTurnCompleted))
	if c := find[sandbox.TurnCompleted](evs); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn after restart = %+v", c)
	}
}

// TestHTTPFileConfinement asks the demo agent to write outside its
// sandbox directory: the write is refused and nothing lands outside.
func TestHTTPFileConfinement(t *testing.T) {
	r := newRun(t)
	if _, err := r.srv.Client.StartTurn(r.ctx, r.sb.ID, "please write ../escape.txt"); err != nil {
		t.Fatal(err)
	}
	evs := r.until(of(sandbox.TypeApprovalRequested))
	appr := find[sandbox.ApprovalRequested](evs)
	if _, err := r.srv.Client.Decide(r.ctx, r.sb.ID, appr.ApprovalID, client.Approve); err != nil {
		t.Fatal(err)
	}
	evs = r.until(of(sandbox.TypeTurnCompleted))
	if tool := find[sandbox.ToolUpdated](evs); tool == nil || tool.Status != sandbox.ToolFailed {
		t.Fatalf("tool = %+v, want failed", tool)
	}
	work := datadir.Dir(r.srv.DataDir).Sandbox(r.sb.ID).Work()
	if _, err := os.Stat(filepath.Join(work, "..", "escape.txt")); err == nil {
		t.Fatal("the agent wrote outside its sandbox directory")
	}
}
