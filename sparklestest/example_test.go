package sparklestest_test

import (
	"context"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestExample is how an application tests its integration with Sparkles:
// start a server, create a sandbox, run a prompt, follow its events, and
// read the log afterwards.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A real server on a free loopback port, with the demo agent, gone
	// when the test ends.
	srv := sparklestest.Start(t)
	c := srv.Client

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"user": "ada"}})
	if err != nil {
		t.Fatal(err)
	}

	// Open the stream before prompting, from the sandbox's current
	// position, so no event of the turn can be missed.
	stream := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(uint64(sb.LastEventID))})
	defer stream.Close()

	// The demo agent reads README.md, thinks, and answers. "write" would
	// make it ask for an approval first.
	turn, err := c.StartTurn(ctx, sb.ID, "read README.md and summarize it")
	if err != nil {
		t.Fatal(err)
	}

	var answer string
	var completed *sandbox.TurnCompleted
	for m, err := range stream.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != client.KindEvent || m.Event.TurnID != turn.ID {
			continue // snapshots and status frames, other turns
		}
		switch d := m.Event.Data.(type) {
		case *sandbox.MessageCompleted:
			answer = d.Text
		case *sandbox.TurnCompleted:
			completed = d
		}
		if completed != nil {
			break
		}
	}
	if got, want := completed.Status, sandbox.TurnSucceeded; got != want {
		t.Fatalf("turn status = %q, want %q", got, want)
	}
	if answer == "" {
		t.Fatal("the turn completed without an assistant message")
	}

	// The same events, durable, from the JSON history.
	page, err := c.Events(ctx, sb.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := page.Events[len(page.Events)-1].Type, sandbox.TypeTurnCompleted; got != want {
		t.Fatalf("last event = %s, want %s", got, want)
	}
	if got, want := page.LastEventID, stream.LastEventID(); got != want {
		t.Fatalf("log ends at %d, the stream at %d", got, want)
	}
}
