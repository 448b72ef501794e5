package sandbox_test

import (
	"encoding/json"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestStateSandboxUpdated: sandbox.updated replaces the resource's config,
// outside a turn or in one, without touching a shallow clone or a clone;
// the event decodes to its payload and is durable.
func TestStateSandboxUpdated(t *testing.T) {
	var st sandbox.State
	if st.Snapshot().Sandbox.Config != nil {
		t.Fatal("a config before any sandbox.updated")
	}
	cfg := sandbox.AgentConfig{Mode: "default", Model: "m1",
		Modes: []sandbox.ConfigChoice{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}}}
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeSandboxUpdated, Data: sandbox.SandboxUpdated{Config: cfg}})
	shallow, deep := st.ShallowCloneForFold(), st.Clone()
	cfg.Mode = "plan"
	st.Apply(&sandbox.Event{ID: 2, Type: sandbox.TypeSandboxUpdated, Data: &sandbox.SandboxUpdated{Config: cfg}})
	if got, want := st.Snapshot().Sandbox.Config.Mode, "plan"; got != want {
		t.Fatalf("mode = %q, want %q", got, want)
	}
	for name, c := range map[string]*sandbox.State{"shallow": shallow, "deep": deep} {
		if got, want := c.Sandbox.Config.Mode, "default"; got != want {
			t.Fatalf("%s clone: mode = %q, want %q", name, got, want)
		}
	}
	deep.Sandbox.Config.Modes[0].Name = "changed"
	if got := st.Sandbox.Config.Modes[0].Name; got != "Default" {
		t.Fatalf("a clone shares the modes: %q", got)
	}

	raw, err := json.Marshal(sandbox.Event{ID: 3, Type: sandbox.TypeSandboxUpdated, SandboxID: "c_1", Data: &sandbox.SandboxUpdated{Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	var ev sandbox.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	if d, ok := ev.Data.(*sandbox.SandboxUpdated); !ok || d.Config.Mode != "plan" || len(d.Config.Modes) != 2 {
		t.Fatalf("decoded %T %+v", ev.Data, ev.Data)
	}
	if !sandbox.TypeSandboxUpdated.Durable() {
		t.Fatal("sandbox.updated is not durable")
	}
}
