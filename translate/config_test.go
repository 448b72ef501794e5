package translate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestConfig: the announced config is curated (redacted, paths rewritten,
// bounded, at most 50 choices) and emitted once; the agent's own
// current_mode_update and config_option_update, in a turn or outside one,
// become sandbox.updated with the whole config, and a change to the same
// config is no news.
func TestConfig(t *testing.T) {
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	var modes []sandbox.ConfigChoice
	for i := range 60 {
		modes = append(modes, sandbox.ConfigChoice{ID: "m" + strings.Repeat("x", i), Name: "Mode"})
	}
	modes[0] = sandbox.ConfigChoice{ID: "default", Name: "Default " + testSecret}
	modes[1] = sandbox.ConfigChoice{ID: "plan", Name: "Plans in " + testDir + "/src"}
	modes[2].ID = strings.Repeat("y", 1000)
	evs := tr.Config(sandbox.AgentConfig{Mode: "default", Model: "m1", Modes: modes,
		Models: []sandbox.ConfigChoice{{ID: "m1", Name: "One"}, {ID: "", Name: "no id"}}})
	if len(evs) != 1 || evs[0].Type != sandbox.TypeSandboxUpdated || evs[0].TurnID != "" {
		t.Fatalf("events %v, want one sandbox.updated outside a turn", evs)
	}
	got := evs[0].Data.(*sandbox.SandboxUpdated).Config
	if len(got.Modes) != sandbox.MaxConfigChoices || tr.Stats().Dropped[DropConfigChoices] != 1 {
		t.Fatalf("%d modes, dropped %v; want %d", len(got.Modes), tr.Stats().Dropped, sandbox.MaxConfigChoices)
	}
	if got, want := got.Modes[0].Name, "Default [REDACTED]"; got != want {
		t.Fatalf("name = %q, want %q", got, want)
	}
	if got, want := got.Modes[1].Name, "Plans in src"; got != want {
		t.Fatalf("name = %q, want %q", got, want)
	}
	if n := len(got.Modes[2].ID); n > sandbox.MaxConfigIDBytes+8 {
		t.Fatalf("an id of %d bytes", n)
	}
	if len(got.Models) != 1 {
		t.Fatalf("models %v, want the one with an id", got.Models)
	}
	if evs := tr.Config(sandbox.AgentConfig{Mode: "default", Model: "m1", Modes: modes, Models: []sandbox.ConfigChoice{{ID: "m1", Name: "One"}}}); len(evs) != 0 {
		t.Fatalf("the same config again: %v", evs)
	}

	update := func(u string) []*sandbox.Event {
		return tr.Update(json.RawMessage(`{"sessionId":"sess-secret-1","update":` + u + `}`))
	}
	// Outside a turn.
	evs = update(`{"sessionUpdate":"current_mode_update","currentModeId":"plan"}`)
	if len(evs) != 1 || evs[0].Data.(*sandbox.SandboxUpdated).Config.Mode != "plan" || len(evs[0].Data.(*sandbox.SandboxUpdated).Config.Modes) != 50 {
		t.Fatalf("current_mode_update outside a turn: %v", evs)
	}
	if evs := update(`{"sessionUpdate":"current_mode_update","currentModeId":"plan"}`); len(evs) != 0 {
		t.Fatalf("the same mode again: %v", evs)
	}
	// In a turn: it belongs to the turn, and leaves the message part open.
	tr.StartTurn("turn_1", sandbox.TextInput("hi"))
	tr.Update(json.RawMessage(`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hi"}}}`))
	evs = update(`{"sessionUpdate":"config_option_update","configOptions":[
		{"id":"mode","category":"mode","type":"select","currentValue":"default","options":[{"value":"default","name":"Default"},{"value":"plan","name":"Plan"}]},
		{"id":"effort","category":"thought_level","type":"select","currentValue":"raw-canary","options":[{"value":"raw-canary","name":"raw-canary"}]},
		{"id":"model","type":"select","currentValue":"m2","options":[{"group":"g","name":"G","options":[{"value":"m2","name":"Two"}]}]}]}`)
	if len(evs) != 1 || evs[0].TurnID != "turn_1" {
		t.Fatalf("config_option_update in a turn: %v", evs)
	}
	raw, _ := json.Marshal(evs[0].Data)
	if got, want := string(raw), `{"config":{"mode":"default","model":"m2","modes":[{"id":"default","name":"Default"},{"id":"plan","name":"Plan"}],"models":[{"id":"m2","name":"Two"}]}}`; got != want {
		t.Fatalf("data\n got %s\nwant %s", got, want)
	}
	if got := tr.CurrentConfig(); got.Model != "m2" {
		t.Fatalf("current config %+v", got)
	}
	for _, bad := range []string{
		`{"sessionUpdate":"current_mode_update"}`,
		`{"sessionUpdate":"config_option_update","configOptions":{}}`,
	} {
		if evs := update(bad); len(evs) != 0 {
			t.Fatalf("%s: %v", bad, evs)
		}
	}
	if got := tr.Stats().Dropped[DropMalformed]; got != 2 {
		t.Fatalf("malformed = %d, want 2", got)
	}
}

// TestConfigKnown: a config the sandbox already shows, made known after a
// restart, is not emitted again.
func TestConfigKnown(t *testing.T) {
	tr := newScripted(&clock{t: epoch})
	known := &sandbox.AgentConfig{Mode: "plan", Modes: []sandbox.ConfigChoice{{ID: "plan", Name: "Plan"}}, Models: []sandbox.ConfigChoice{}}
	tr.Known(known)
	if evs := tr.Config(*known); len(evs) != 0 {
		t.Fatalf("a known config again: %v", evs)
	}
	if evs := tr.Config(sandbox.AgentConfig{Mode: "default", Modes: known.Modes}); len(evs) != 1 {
		t.Fatalf("a change: %v", evs)
	}
}
