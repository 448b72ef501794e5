package agent

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func startDemoConn(t *testing.T) *Conn {
	t.Helper()
	return MustStart(t, "", t.TempDir(), func(cfg *Config) {
		cfg.Command, cfg.Run = nil, RunDemo
	})
}

func TestSessionConfig(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		c := startDemoConn(t)
		sc := c.SessionConfig()
		if got, want := sc.Mode+"/"+sc.Model, "default/demo-small"; got != want {
			t.Fatalf("config = %q, want %q", got, want)
		}
		if got, want := sc.Modes, demoModes; !reflect.DeepEqual(got, want) {
			t.Fatalf("modes = %v, want %v", got, want)
		}
		ctx := context.Background()
		if err := c.SetMode(ctx, "plan"); err != nil {
			t.Fatal(err)
		}
		if err := c.SetModel(ctx, "demo-large"); err != nil {
			t.Fatal(err)
		}
		if err := c.Prompt("turn_1", "mode"); err != nil {
			t.Fatal(err)
		}
		if got := messageText(t, until(t, c, PromptDone)); !strings.Contains(got, "Mode: plan. Model: demo-large.") {
			t.Fatalf("text = %q", got)
		}
		if sc := c.SessionConfig(); sc.Mode != "plan" || sc.Model != "demo-large" {
			t.Fatalf("config after the sets = %+v", sc)
		}
	})
	t.Run("ErrUnknownChoice", func(t *testing.T) {
		c := startDemoConn(t)
		err := c.SetMode(context.Background(), "yolo")
		ce, ok := errors.AsType[*ChoiceError](err)
		if !ok {
			t.Fatalf("err = %v, want a *ChoiceError", err)
		}
		if got, want := ce.Error(), `the agent offers no mode "yolo": it offers default, plan`; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})
	t.Run("AgentSwitch", func(t *testing.T) {
		c := startDemoConn(t)
		if err := c.Prompt("turn_1", "planmode"); err != nil {
			t.Fatal(err)
		}
		var saw bool
		for _, in := range until(t, c, PromptDone) {
			if in.Kind == Update && strings.Contains(string(in.Params), `"current_mode_update"`) {
				saw = true
			}
		}
		if !saw {
			t.Fatal("no current_mode_update")
		}
	})
}

// TestParseSessionConfig reads an answer shaped as claude-agent-acp's:
// modes and models, and configOptions that win over them (grouped options
// included), whose ids set them.
func TestParseSessionConfig(t *testing.T) {
	answer := `{"sessionId":"s","modes":{"currentModeId":"default","availableModes":[{"id":"default","name":"Default"}]},
	"models":{"currentModelId":"m1","availableModels":[{"modelId":"m1","name":"One"}]},
	"configOptions":[
	 {"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"plan","options":[{"value":"default","name":"Default"},{"value":"plan","name":"Plan Mode"}]},
	 {"id":"effort","category":"thought_level","type":"select","currentValue":"high","options":[{"value":"high","name":"High"}]},
	 {"id":"mdl","name":"Model","category":"model","type":"select","currentValue":"m2","options":[{"group":"g","name":"G","options":[{"value":"m2","name":"Two"}]}]}]}`
	sc := parseSessionConfig(json.RawMessage(answer))
	want := SessionConfig{
		Mode: "plan", Model: "m2",
		Modes:      []Choice{{"default", "Default"}, {"plan", "Plan Mode"}},
		Models:     []Choice{{"m2", "Two"}},
		modeOption: "mode", modelOption: "mdl",
	}
	if !reflect.DeepEqual(sc, want) {
		t.Fatalf("config = %+v, want %+v", sc, want)
	}
	if sc := parseSessionConfig(json.RawMessage(`null`)); !reflect.DeepEqual(sc, SessionConfig{}) {
		t.Fatalf("config of null = %+v", sc)
	}
}
