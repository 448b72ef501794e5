package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func configOf(t *testing.T, sb sandbox.Sandbox) string {
	t.Helper()
	if sb.Config == nil {
		t.Fatal("the sandbox has no config")
	}
	return sb.Config.Mode + "/" + sb.Config.Model
}

func sandboxUpdated(evs []sandbox.Event) *sandbox.SandboxUpdated {
	for i := len(evs) - 1; i >= 0; i-- {
		if d, ok := evs[i].Data.(*sandbox.SandboxUpdated); ok {
			return d
		}
	}
	return nil
}

func TestConfig(t *testing.T) {
	ctx := context.Background()
	t.Run("CreateWithConfig", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{Config: &sandbox.ConfigChange{Mode: "plan", Model: "demo-large"}})
		if got, want := configOf(t, sb), "plan/demo-large"; got != want {
			t.Fatalf("config at create = %q, want %q", got, want)
		}
		sb = e.waitStatus(sb.ID, sandbox.StatusReady)
		if got, want := configOf(t, sb), "plan/demo-large"; got != want {
			t.Fatalf("config once ready = %q, want %q", got, want)
		}
		if got, want := len(sb.Config.Modes), 2; got != want {
			t.Fatalf("%d modes, want %d", got, want)
		}
		// The agent works in them from its first turn.
		if _, err := e.co.StartTurn(ctx, sb.ID, "mode"); err != nil {
			t.Fatal(err)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeMessageCompleted))
		if got := evs[len(evs)-1].Data.(*sandbox.MessageCompleted).Text; !strings.Contains(got, "Mode: plan. Model: demo-large.") {
			t.Fatalf("reply %q", got)
		}
	})

	t.Run("UnknownAtBoot", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{Config: &sandbox.ConfigChange{Mode: "yolo"}})
		sb = e.waitStatus(sb.ID, sandbox.StatusReady)
		if got, want := configOf(t, sb), "default/demo-small"; got != want {
			t.Fatalf("config = %q, want the agent's own %q", got, want)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxError))
		d := evs[len(evs)-1].Data.(*sandbox.SandboxError)
		if d.Code != sandbox.ErrConfigFailed || !strings.Contains(d.Message, "default, plan") {
			t.Fatalf("sandbox.error = %+v", d)
		}
	})

	t.Run("BetweenTurns", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		sb = e.waitStatus(sb.ID, sandbox.StatusReady)
		if got, want := configOf(t, sb), "default/demo-small"; got != want {
			t.Fatalf("config = %q, want %q", got, want)
		}
		got, err := e.co.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "plan", Model: "demo-large"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := configOf(t, got), "plan/demo-large"; got != want {
			t.Fatalf("config answered = %q, want %q", got, want)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxUpdated))
		if d := sandboxUpdated(evs); d.Config.Mode != "plan" || d.Config.Model != "demo-large" || len(d.Config.Models) != 2 || evs[len(evs)-1].TurnID != "" {
			t.Fatalf("sandbox.updated = %+v", evs[len(evs)-1])
		}
		if _, err := e.co.StartTurn(ctx, sb.ID, "mode"); err != nil {
			t.Fatal(err)
		}
		rest := e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
		if strings.Contains(types(rest), string(sandbox.TypeSandboxUpdated)) {
			t.Fatalf("the agent's own news of the change was recorded again: %s", types(rest))
		}
		for _, ev := range rest {
			if d, ok := ev.Data.(*sandbox.MessageCompleted); ok && !strings.Contains(d.Text, "Mode: plan. Model: demo-large.") {
				t.Fatalf("reply %q", d.Text)
			}
		}
	})

	t.Run("ErrUnknownChoice", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		e.waitStatus(sb.ID, sandbox.StatusReady)
		_, err := e.co.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Model: "gpt-9"})
		if got, want := sandbox.ErrorType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
		if got, want := err.Error(), `the agent offers no model "gpt-9": it offers demo-small, demo-large`; !strings.Contains(got, want) {
			t.Fatalf("err = %q, want it to say %q", got, want)
		}
		for _, bad := range []sandbox.ConfigChange{{}, {Mode: strings.Repeat("x", 300)}, {Mode: "a\nb"}} {
			if _, err := e.co.SetConfig(ctx, sb.ID, bad); sandbox.ErrorType(err) != sandbox.EInvalidRequest {
				t.Fatalf("%+v: err = %v, want invalid_request", bad, err)
			}
		}
	})

	t.Run("ErrConflictDuringTurn", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		turn, err := e.co.StartTurn(ctx, sb.ID, "hang after one chunk")
		if err != nil {
			t.Fatal(err)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeMessageUpdated))
		_, err = e.co.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "plan"})
		if got, want := sandbox.ErrorType(err), sandbox.EConflict; got != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
		if _, err := e.co.CancelTurn(ctx, sb.ID, turn.ID); err != nil {
			t.Fatal(err)
		}
		e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
		if _, err := e.co.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "plan"}); err != nil {
			t.Fatalf("after the turn: %v", err)
		}
	})

	t.Run("AgentSwitch", func(t *testing.T) {
		e := newEnv(t, nil)
		sb := e.create(sandbox.CreateParams{})
		turn, err := e.co.StartTurn(ctx, sb.ID, "planmode")
		if err != nil {
			t.Fatal(err)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
		d := sandboxUpdated(evs)
		if d == nil || d.Config.Mode != "plan" || len(d.Config.Modes) != 2 {
			t.Fatalf("sandbox.updated = %+v in %s", d, types(evs))
		}
		for _, ev := range evs {
			if ev.Type == sandbox.TypeSandboxUpdated && ev.TurnID != turn.ID {
				t.Fatalf("sandbox.updated of turn %q, want %q", ev.TurnID, turn.ID)
			}
		}
		got, err := e.store.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := configOf(t, got), "plan/demo-small"; got != want {
			t.Fatalf("config = %q, want %q", got, want)
		}
	})

	t.Run("StoppedAppliesAtBoot", func(t *testing.T) {
		e := newEnv(t, func(c *coordinator.Config) { c.MaxAgents = 1 })
		hold := e.create(sandbox.CreateParams{})
		e.waitStatus(hold.ID, sandbox.StatusReady)
		// Every agent slot is held: this one's agent waits for its first turn.
		sb := e.create(sandbox.CreateParams{})
		sb = e.waitStatus(sb.ID, sandbox.StatusStopped)
		got, err := e.co.SetConfig(ctx, sb.ID, sandbox.ConfigChange{Mode: "plan"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := got.Config.Mode, "plan"; got != want {
			t.Fatalf("recorded mode = %q, want %q", got, want)
		}
		evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxUpdated))
		if d := sandboxUpdated(evs); d.Config.Mode != "plan" {
			t.Fatalf("sandbox.updated = %+v", d)
		}
		if _, err := e.co.DeleteSandbox(ctx, hold.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.co.StartTurn(ctx, sb.ID, "mode"); err != nil {
			t.Fatal(err)
		}
		rest := e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeMessageCompleted))
		if got := rest[len(rest)-1].Data.(*sandbox.MessageCompleted).Text; !strings.Contains(got, "Mode: plan. Model: demo-small.") {
			t.Fatalf("reply %q", got)
		}
	})
}
