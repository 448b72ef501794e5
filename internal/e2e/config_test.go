package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// TestConfigServe: through the server a user runs, with the demo agent: a
// sandbox created with a mode starts in it, with the agent's choices in
// its config; a PATCH between turns switches the model and is recorded as
// sandbox.updated, which the stream shows; a PATCH naming
// a model the agent does not offer is 400 with its choices, one during a
// turn 409; the agent's own switch (planmode) is recorded too.
func TestConfigServe(t *testing.T) {
	srv := sparklestest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Config: &sandbox.ConfigChange{Mode: "plan"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Config == nil || sb.Config.Mode != "plan" {
		t.Fatalf("config at create = %+v", sb.Config)
	}
	stream := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer stream.Close()
	next := func(typ sandbox.Type) sandbox.Event {
		t.Helper()
		for {
			m, err := stream.Next(ctx)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if m.Kind == client.KindEvent && m.Event.Type == typ {
				return m.Event
			}
		}
	}

	turn, err := c.StartTurn(ctx, sb.ID, "mode")
	if err != nil {
		t.Fatal(err)
	}
	if d := next(sandbox.TypeMessageCompleted).Data.(*sandbox.MessageCompleted); !strings.Contains(d.Text, "Mode: plan. Model: demo-small.") {
		t.Fatalf("reply %q", d.Text)
	}
	next(sandbox.TypeTurnCompleted)
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config == nil || got.Config.Mode != "plan" || len(got.Config.Models) != 2 || got.Config.Models[1] != (sandbox.ConfigChoice{ID: "demo-large", Name: "Demo Large"}) {
		t.Fatalf("config once booted = %+v", got.Config)
	}

	_, err = c.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Model: "gpt-9"})
	if !errors.Is(err, client.ErrInvalidRequest) || !strings.Contains(err.Error(), "demo-small, demo-large") {
		t.Fatalf("an unknown model: %v, want invalid_request naming the choices", err)
	}
	got, err = c.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Model: "demo-large"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.Mode != "plan" || got.Config.Model != "demo-large" {
		t.Fatalf("config answered = %+v", got.Config)
	}
	up := next(sandbox.TypeSandboxUpdated)
	if d := up.Data.(*sandbox.SandboxUpdated); d.Config.Model != "demo-large" || up.TurnID != "" {
		t.Fatalf("sandbox.updated = %+v", up)
	}

	if _, err := c.StartTurn(ctx, sb.ID, "hang"); err != nil {
		t.Fatal(err)
	}
	next(sandbox.TypeMessageUpdated)
	if _, err := c.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "default"}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a change during a turn: %v, want conflict", err)
	}
	cur, err := c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelTurn(ctx, sb.ID, cur.CurrentTurn.ID); err != nil {
		t.Fatal(err)
	}
	next(sandbox.TypeTurnCompleted)

	if _, err := c.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "default"}); err != nil {
		t.Fatal(err)
	}
	next(sandbox.TypeSandboxUpdated)
	if _, err := c.StartTurn(ctx, sb.ID, "planmode"); err != nil {
		t.Fatal(err)
	}
	own := next(sandbox.TypeSandboxUpdated)
	if d := own.Data.(*sandbox.SandboxUpdated); d.Config.Mode != "plan" || d.Config.Model != "demo-large" || own.TurnID == "" || own.TurnID == turn.ID {
		t.Fatalf("the agent's own switch: %+v", own)
	}
	next(sandbox.TypeTurnCompleted)
	if got, err = c.GetSandbox(ctx, sb.ID); err != nil || got.Config.Mode != "plan" {
		t.Fatalf("config after the agent's switch = %+v (%v)", got.Config, err)
	}
}
