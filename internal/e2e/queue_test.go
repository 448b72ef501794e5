package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestQueuedTurnsServe: through the server a user runs, with the demo
// agent: turns sent with queue while one hangs are answered 202 queued
// and listed on the sandbox; one canceled while it waits ends without
// running; canceling the hung turn starts the next, which the stream
// follows from its turn.queued to its turn.completed, and then the next.
func TestQueuedTurnsServe(t *testing.T) {
	srv := sparklestest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer stream.Close()
	// until reads the stream until done, returning the turn.* events read.
	var life []string
	until := func(done func(sandbox.Event) bool) {
		t.Helper()
		for {
			m, err := stream.Next(ctx)
			if err != nil {
				t.Fatalf("stream: %v; turns so far %v", err, life)
			}
			if m.Kind != client.KindEvent {
				continue
			}
			ev := m.Event
			if strings.HasPrefix(string(ev.Type), "turn.") && ev.Type != "turn.usage" {
				life = append(life, string(ev.Type)+" "+ev.TurnID)
			}
			if done(ev) {
				return
			}
		}
	}

	hang, err := c.StartTurn(ctx, sb.ID, "hang")
	if err != nil {
		t.Fatal(err)
	}
	until(func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeMessageUpdated })
	if _, err := c.StartTurn(ctx, sb.ID, "hello"); !errors.Is(err, client.ErrTurnInProgress) {
		t.Fatalf("a turn without queue while one runs: %v, want turn_in_progress", err)
	}
	var queued []sandbox.Turn
	for _, input := range []string{"hello", "hello again", "and once more"} {
		q, err := c.QueueTurn(ctx, sb.ID, input)
		if err != nil {
			t.Fatal(err)
		}
		if q.Status != sandbox.TurnQueued {
			t.Fatalf("queued turn = %+v, want status queued", q)
		}
		queued = append(queued, q)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.QueuedTurns) != 3 || got.QueuedTurns[0].ID != queued[0].ID || got.CurrentTurn == nil || got.CurrentTurn.ID != hang.ID {
		t.Fatalf("sandbox: current %+v, queued %+v", got.CurrentTurn, got.QueuedTurns)
	}
	if q, err := c.CancelTurn(ctx, sb.ID, queued[1].ID); err != nil || q.Status != sandbox.TurnCanceled {
		t.Fatalf("cancel of a queued turn = %+v, %v", q, err)
	}
	if _, err := c.CancelTurn(ctx, sb.ID, hang.ID); err != nil {
		t.Fatal(err)
	}
	until(func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnStarted && ev.TurnID == queued[2].ID })
	want := []string{
		"turn.started " + hang.ID,
		"turn.queued " + queued[0].ID, "turn.queued " + queued[1].ID, "turn.queued " + queued[2].ID,
		"turn.completed " + queued[1].ID, "turn.completed " + hang.ID,
		"turn.started " + queued[0].ID, "turn.completed " + queued[0].ID,
		"turn.started " + queued[2].ID,
	}
	if !slices.Equal(life, want) {
		t.Fatalf("turns:\ngot  %s\nwant %s", strings.Join(life, "\n     "), strings.Join(want, "\n     "))
	}
	if q, err := c.GetTurn(ctx, sb.ID, queued[0].ID); err != nil || q.Status != sandbox.TurnSucceeded {
		t.Fatalf("the first queued turn = %+v, %v; want succeeded", q, err)
	}
}

// TestCLIPromptQueue: sparkles prompt --queue in a sandbox whose turn
// hangs waits behind it, and follows its own turn once it starts.
func TestCLIPromptQueue(t *testing.T) {
	srv := sparklestest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hang, err := c.StartTurn(ctx, sb.ID, "hang")
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer stream.Close()
	cmd := exec.CommandContext(ctx, binary, "prompt", "--queue", "--sandbox", sb.ID, "hello")
	cmd.Env = cliEnv(t, serverEnv(srv)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v; the CLI's stderr: %s", err, stderr.String())
		}
		if m.Kind == client.KindEvent && m.Event.Type == sandbox.TypeTurnQueued {
			break
		}
	}
	if _, err := c.CancelTurn(ctx, sb.ID, hang.ID); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sparkles prompt --queue: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), `You asked: "hello".`) {
		t.Fatalf("stdout lacks the queued turn's reply:\n%s", stdout.String())
	}
}
