package sandbox_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func outputEvent(id, i int, text string, exit *int) *sandbox.Event {
	return &sandbox.Event{ID: uint64(id), Type: sandbox.TypeToolOutput, TurnID: "turn_1", Data: sandbox.ToolOutput{
		ToolCallID: fmt.Sprintf("tool_%05d", i), Text: text, ExitCode: exit}}
}

// TestStateToolOutput: a tool's last output is part of it in the state and
// the snapshot; a later tool.updated keeps it; the output of a tool the
// state does not hold goes nowhere; a clone shares none of it.
func TestStateToolOutput(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	st.Apply(toolEvent(2, 1, sandbox.ToolRunning))
	st.Apply(outputEvent(3, 1, "one\n", nil))
	zero := 0
	st.Apply(outputEvent(4, 1, "one\ntwo\n", &zero))
	st.Apply(toolEvent(5, 1, sandbox.ToolCompleted))
	st.Apply(outputEvent(6, 7, "lost\n", nil))
	c := st.Clone()
	*st.Tools[0].Output.ExitCode = 9
	snap := c.Snapshot()
	if len(snap.Tools) != 1 {
		t.Fatalf("snapshot tools %+v, want one", snap.Tools)
	}
	o := snap.Tools[0].Output
	if o == nil || o.Text != "one\ntwo\n" || o.ExitCode == nil || *o.ExitCode != 0 || snap.Tools[0].Status != sandbox.ToolCompleted {
		t.Fatalf("snapshot tool %+v output %+v, want completed with the last output and exit code 0, not shared with its clone", snap.Tools[0], o)
	}
	b, _ := json.Marshal(toolEvent(5, 1, sandbox.ToolCompleted).Data)
	if strings.Contains(string(b), "output") {
		t.Fatalf("a tool.updated without output writes %s", b)
	}
	st.Apply(&sandbox.Event{ID: 7, Type: sandbox.TypeTurnStarted, TurnID: "turn_2", Data: &sandbox.TurnStarted{}})
	if len(st.Tools) != 0 {
		t.Fatalf("a new turn keeps tools %+v", st.Tools)
	}
}

// TestSnapshotBoundToolOutput: outputs count in the snapshot's bound; the
// running tools come first, with their outputs.
func TestSnapshotBoundToolOutput(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	full := strings.Repeat("o", sandbox.MaxToolOutputBytes)
	id := 2
	for i := range 150 { // 2.4 MiB of output
		status := sandbox.ToolCompleted
		if i%50 == 0 {
			status = sandbox.ToolRunning
		}
		st.Apply(toolEvent(id, i, status))
		st.Apply(outputEvent(id+1, i, full, nil))
		id += 2
	}
	snap := st.Snapshot()
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > sandbox.SnapshotMaxBytes {
		t.Fatalf("snapshot of %d bytes, want at most %d", len(b), sandbox.SnapshotMaxBytes)
	}
	ids := toolIDs(snap.Tools)
	for _, run := range []string{"tool_00000", "tool_00050", "tool_00100"} {
		i := slices.Index(ids, run)
		if i < 0 || snap.Tools[i].Output == nil || snap.Tools[i].Output.Text != full {
			t.Fatalf("snapshot lacks the running %s with its output", run)
		}
	}
	if len(ids)+snap.ToolsOmitted != 150 || snap.ToolsOmitted == 0 || ids[len(ids)-1] != "tool_00149" {
		t.Fatalf("snapshot tools %d, %d omitted: want the newest that fit, 150 in all", len(ids), snap.ToolsOmitted)
	}
}
