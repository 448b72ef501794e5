package sandbox

import "testing"

// A sandbox is settled with no turn open or queued and no agent that may
// be running.
func TestSettled(t *testing.T) {
	turn := &Turn{ID: "turn_1", Status: TurnRunning}
	for _, tc := range []struct {
		name string
		sb   Sandbox
		want bool
	}{
		{"Stopped", Sandbox{Status: StatusStopped}, true},
		{"Failed", Sandbox{Status: StatusFailed}, true},
		{"Deleted", Sandbox{Status: StatusDeleted}, true},
		{"Creating", Sandbox{Status: StatusCreating}, false},
		{"Booting", Sandbox{Status: StatusBooting}, false},
		{"Ready", Sandbox{Status: StatusReady}, false},
		{"Stopping", Sandbox{Status: StatusStopping}, false},
		{"StoppedWithTurn", Sandbox{Status: StatusStopped, CurrentTurn: turn}, false},
		{"StoppedWithQueue", Sandbox{Status: StatusStopped, QueuedTurns: []Turn{{ID: "turn_2", Status: TurnQueued}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Settled(tc.sb); got != tc.want {
				t.Fatalf("Settled = %v, want %v", got, tc.want)
			}
		})
	}
}
