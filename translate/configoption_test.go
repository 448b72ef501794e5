package translate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestParseConfigOptions: the first select option of each kind, by
// category or else by id; a malformed option skipped and the rest kept;
// groups flattened, choices without a value left out, at most
// sandbox.MaxConfigChoices of them.
func TestParseConfigOptions(t *testing.T) {
	choices := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"value":"v%d","name":"V%d"}`, i, i)
		}
		return b.String()
	}
	for _, tt := range []struct {
		name        string
		raw         string
		mode, model *ConfigOption
	}{
		{"Empty", `[]`, nil, nil},
		{"Null", `null`, nil, nil},
		{"ByCategory", `[{"id":"m","category":"mode","type":"select","currentValue":"a","options":[{"value":"a","name":"A"}]}]`,
			&ConfigOption{ID: "m", Current: "a", Choices: []sandbox.ConfigChoice{{ID: "a", Name: "A"}}}, nil},
		{"ByID", `[{"id":"model","currentValue":"x"}]`, nil, &ConfigOption{ID: "model", Current: "x"}},
		{"CategoryOverID", `[{"id":"mode","category":"thought_level","currentValue":"high"}]`, nil, nil},
		{"NotSelect", `[{"id":"mode","type":"boolean","currentValue":"true"}]`, nil, nil},
		{"FirstWins", `[{"id":"mode","currentValue":"a"},{"id":"mode","currentValue":"b"}]`, &ConfigOption{ID: "mode", Current: "a"}, nil},
		{"MalformedSkipped", `[{"id":"mode","currentValue":"a","options":"all"},"mode",42,null,
			{"id":"mode","currentValue":"b"},{"id":"model","currentValue":"c"}]`,
			&ConfigOption{ID: "mode", Current: "b"}, &ConfigOption{ID: "model", Current: "c"}},
		{"Groups", `[{"id":"model","currentValue":"b","options":[{"value":"a","name":"A"},{"value":"","name":"no value"},
			{"group":"g","name":"G","options":[{"value":"b","name":"B"},{"value":"","name":"none"}]}]}]`,
			nil, &ConfigOption{ID: "model", Current: "b", Choices: []sandbox.ConfigChoice{{ID: "a", Name: "A"}, {ID: "b", Name: "B"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mode, model, err := ParseConfigOptions(json.RawMessage(tt.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(mode, tt.mode) || !reflect.DeepEqual(model, tt.model) {
				t.Fatalf("mode %+v, model %+v; want %+v, %+v", mode, model, tt.mode, tt.model)
			}
		})
	}
	t.Run("Cut", func(t *testing.T) {
		for _, n := range []int{sandbox.MaxConfigChoices, sandbox.MaxConfigChoices + 1} {
			mode, _, err := ParseConfigOptions(json.RawMessage(`[{"id":"mode","options":[{"group":"g","options":[` + choices(n) + `]}]}]`))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(mode.Choices), sandbox.MaxConfigChoices; got != want {
				t.Fatalf("%d offered: %d choices, want %d", n, got, want)
			}
			if got, want := mode.Cut, n > sandbox.MaxConfigChoices; got != want {
				t.Fatalf("%d offered: cut %v, want %v", n, got, want)
			}
			if got, want := mode.Choices[sandbox.MaxConfigChoices-1].ID, fmt.Sprintf("v%d", sandbox.MaxConfigChoices-1); got != want {
				t.Fatalf("last choice %s, want %s: the first ones are kept", got, want)
			}
		}
	})
	t.Run("ErrNotList", func(t *testing.T) {
		for _, raw := range []string{``, `{}`, `"mode"`, `[{]`} {
			if _, _, err := ParseConfigOptions(json.RawMessage(raw)); err == nil {
				t.Errorf("%q: no error", raw)
			}
		}
	})
}

// TestConfigOptionUpdateSkipsMalformed: a config_option_update with one
// malformed option still updates the config from the others, and choices
// past the bound are counted as dropped.
func TestConfigOptionUpdateSkipsMalformed(t *testing.T) {
	tr := newScripted(&clock{t: epoch})
	var b strings.Builder
	for i := range sandbox.MaxConfigChoices + 5 {
		fmt.Fprintf(&b, `{"value":"m%d","name":"M%d"},`, i, i)
	}
	evs := tr.Update(json.RawMessage(`{"sessionId":"s","update":{"sessionUpdate":"config_option_update","configOptions":[
		{"id":"mode","type":"select","currentValue":7},
		{"id":"model","type":"select","currentValue":"m1","options":[` + strings.TrimSuffix(b.String(), ",") + `]}]}}`))
	if len(evs) != 1 {
		t.Fatalf("events %v, want one sandbox.updated", evs)
	}
	c := evs[0].Data.(*sandbox.SandboxUpdated).Config
	if c.Model != "m1" || len(c.Models) != sandbox.MaxConfigChoices || c.Mode != "" {
		t.Fatalf("config %+v, want model m1 of %d choices and no mode", c, sandbox.MaxConfigChoices)
	}
	if got := tr.Stats().Dropped; got[DropConfigChoices] != 1 || got[DropMalformed] != 0 {
		t.Fatalf("dropped %v, want one %s and no %s", got, DropConfigChoices, DropMalformed)
	}
}
