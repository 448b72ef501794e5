package sandbox_test

import (
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestStateApplyValues(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeMessageUpdated, Data: sandbox.MessageUpdated{PartID: "part_1", Text: "x"}})
	if got, want := len(st.Messages), 1; got != want {
		t.Fatalf("parts after a value payload = %d, want %d", got, want)
	}
}
