package cli

import (
	"slices"
	"testing"
)

// TestDemoCommand checks how serve starts its demo agent: at the pace a
// person needs unless its environment sets another.
func TestDemoCommand(t *testing.T) {
	t.Run("Default", func(t *testing.T) {
		t.Setenv(slowPauseEnv, "")
		argv, err := demoCommand("/bin/sparkles")
		if err != nil || !slices.Equal(argv, []string{"/bin/sparkles", "agent", "demo"}) {
			t.Fatalf("demoCommand = %q, %v", argv, err)
		}
	})
	t.Run("Env", func(t *testing.T) {
		t.Setenv(slowPauseEnv, "10ms")
		argv, err := demoCommand("/bin/sparkles")
		if err != nil || !slices.Equal(argv, []string{"/bin/sparkles", "agent", "demo", "--slow-pause", "10ms"}) {
			t.Fatalf("demoCommand = %q, %v", argv, err)
		}
	})
}
