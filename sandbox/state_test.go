package sandbox_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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

func toolEvent(id int, i int, status string) *sandbox.Event {
	return &sandbox.Event{ID: uint64(id), Type: sandbox.TypeToolUpdated, TurnID: "turn_1", Data: &sandbox.ToolUpdated{
		ToolCallID: fmt.Sprintf("tool_%05d", i), Title: "Read", Kind: "read", Status: status}}
}

func toolIDs(tools []sandbox.ToolUpdated) []string {
	ids := make([]string, len(tools))
	for i, t := range tools {
		ids[i] = t.ToolCallID
	}
	return ids
}

// TestStateKeepsRecentTools: a turn's finished tools are kept down to the
// most recent, the running ones all, in the order they came, with the rest
// counted; updates find their tool wherever it is after a trim.
func TestStateKeepsRecentTools(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	st.Apply(toolEvent(2, 0, sandbox.ToolRunning))
	const n = 1000
	for i := 1; i <= n; i++ {
		st.Apply(toolEvent(2+i, i, sandbox.ToolPending))
		st.Apply(toolEvent(2+i, i, sandbox.ToolCompleted))
	}
	if len(st.Tools)+st.ToolsOmitted != n+1 || len(st.Tools) > 2*sandbox.KeptFinishedTools+1 || len(st.Tools) < sandbox.KeptFinishedTools+1 {
		t.Fatalf("%d tools kept, %d omitted, want %d in all and %d to %d kept", len(st.Tools), st.ToolsOmitted, n+1, sandbox.KeptFinishedTools+1, 2*sandbox.KeptFinishedTools+1)
	}
	ids := toolIDs(st.Tools)
	if ids[0] != "tool_00000" || ids[len(ids)-1] != fmt.Sprintf("tool_%05d", n) || !slices.IsSorted(ids) {
		t.Fatalf("tools kept %v…, want the running one first and the newest last, in order", ids[:3])
	}
	// The running tool ends after every trim: it is updated in place.
	st.Apply(toolEvent(n+3, 0, sandbox.ToolFailed))
	if st.Tools[0].ToolCallID != "tool_00000" || st.Tools[0].Status != sandbox.ToolFailed {
		t.Fatalf("first tool %+v, want tool_00000 failed in place", st.Tools[0])
	}
	// A state decoded from a store has no index: it builds one.
	b, _ := json.Marshal(&st)
	var back sandbox.State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.Apply(toolEvent(n+4, n, sandbox.ToolFailed))
	if last := back.Tools[len(back.Tools)-1]; last.ToolCallID != fmt.Sprintf("tool_%05d", n) || last.Status != sandbox.ToolFailed || len(back.Tools) != len(st.Tools) {
		t.Fatalf("after decoding, the update of the newest tool made %+v and %d tools, want it in place", last, len(back.Tools))
	}
}

// TestStateCloneForFold: a writer's clone takes over the index; the state
// it copied still folds right (a writer that drops its clone after a failed
// write folds the same events again into a new clone of it).
func TestStateCloneForFold(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	for i := range 50 {
		st.Apply(toolEvent(2+i, i, sandbox.ToolRunning))
	}
	for _, clone := range []func(*sandbox.State) *sandbox.State{(*sandbox.State).CloneForFold, (*sandbox.State).ShallowCloneForFold} {
		dropped := clone(&st)
		for i := range 300 { // finished ones, trimmed, and new ones
			dropped.Apply(toolEvent(60+i, i, sandbox.ToolCompleted))
		}
		c := clone(&st)
		c.Apply(toolEvent(60, 10, sandbox.ToolCompleted))
		c.Apply(toolEvent(61, 50, sandbox.ToolRunning))
		if len(c.Tools) != 51 || c.Tools[10].Status != sandbox.ToolCompleted || c.Tools[50].ToolCallID != "tool_00050" || c.ToolsOmitted != 0 {
			t.Fatalf("a clone after a dropped one: %d tools, tool 10 %s, last %s, %d omitted; want 51, completed, tool_00050, 0",
				len(c.Tools), c.Tools[10].Status, c.Tools[50].ToolCallID, c.ToolsOmitted)
		}
		if len(st.Tools) != 50 || st.Tools[10].Status != sandbox.ToolRunning {
			t.Fatalf("the clones changed the state they copied: %d tools, tool 10 %s", len(st.Tools), st.Tools[10].Status)
		}
	}
}

// TestSnapshotBound: whatever the turn, a snapshot is at most
// SnapshotMaxBytes: the running tools first, then the message parts and the
// finished tools, newest first, each list in its order, the rest counted.
func TestSnapshotBound(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	big := strings.Repeat("y", sandbox.SnapshotMaxBytes/3)
	id := 2
	for p := range 4 { // 4/3 MiB of text
		st.Apply(&sandbox.Event{ID: uint64(id), Type: sandbox.TypeMessageUpdated, TurnID: "turn_1",
			Data: &sandbox.MessageUpdated{MessageID: "m", PartID: fmt.Sprintf("part_%d", p), Index: p, Kind: "text", Text: big}})
		id++
	}
	for i := range 150 {
		status := sandbox.ToolCompleted
		if i%50 == 0 {
			status = sandbox.ToolRunning
		}
		ev := toolEvent(id, i, status)
		ev.Data.(*sandbox.ToolUpdated).Title = strings.Repeat("t", 4000) // 600 KB of tools
		st.Apply(ev)
		id++
	}
	snap := st.Snapshot()
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > sandbox.SnapshotMaxBytes {
		t.Fatalf("snapshot of %d bytes, want at most %d", len(b), sandbox.SnapshotMaxBytes)
	}
	if got := []string{snap.Messages[0].PartID, snap.Messages[1].PartID}; len(snap.Messages) != 2 || snap.MessagesOmitted != 2 || got[0] != "part_2" || got[1] != "part_3" {
		t.Fatalf("snapshot parts %d (%d omitted), want the newest 2 of 4 in order", len(snap.Messages), snap.MessagesOmitted)
	}
	ids := toolIDs(snap.Tools)
	for _, run := range []string{"tool_00000", "tool_00050", "tool_00100"} {
		if !slices.Contains(ids, run) {
			t.Fatalf("snapshot tools lack the running %s", run)
		}
	}
	if !slices.IsSorted(ids) || ids[len(ids)-1] != "tool_00149" || len(ids)+snap.ToolsOmitted != 150 || snap.ToolsOmitted == 0 {
		t.Fatalf("snapshot tools %d, %d omitted, last %s: want the newest kept in order, 150 in all, some omitted", len(ids), snap.ToolsOmitted, ids[len(ids)-1])
	}
	// A small state is shown whole.
	var small sandbox.State
	small.Apply(toolEvent(1, 1, sandbox.ToolCompleted))
	if s := small.Snapshot(); len(s.Tools) != 1 || s.ToolsOmitted != 0 || s.MessagesOmitted != 0 || s.Messages == nil || s.Approvals == nil {
		t.Fatalf("small snapshot %+v, want it whole with [] lists", s)
	}
}

// TestStatePlan: the turn's last plan is the state's and its snapshot's;
// a new turn starts without one.
func TestStatePlan(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	if snap := st.Snapshot(); snap.Plan != nil {
		t.Fatalf("snapshot plan %+v before any, want null", snap.Plan)
	}
	for i, status := range []string{sandbox.PlanInProgress, sandbox.PlanCompleted} {
		st.Apply(&sandbox.Event{ID: uint64(2 + i), Type: sandbox.TypePlanUpdated, TurnID: "turn_1",
			Data: sandbox.PlanUpdated{Entries: []sandbox.PlanEntry{{Content: "Fix it", Status: status, Priority: sandbox.PriorityHigh}}}})
	}
	c := st.Clone()
	st.Plan.Entries[0].Content = "changed"
	if snap := c.Snapshot(); snap.Plan == nil || len(snap.Plan.Entries) != 1 || snap.Plan.Entries[0].Status != sandbox.PlanCompleted || snap.Plan.Entries[0].Content != "Fix it" {
		t.Fatalf("snapshot plan %+v, want the last one, not shared with its clone", snap.Plan)
	}
	st.Apply(&sandbox.Event{ID: 4, Type: sandbox.TypeTurnStarted, TurnID: "turn_2", Data: &sandbox.TurnStarted{}})
	if st.Plan != nil {
		t.Fatalf("a new turn keeps the plan %+v", st.Plan)
	}
}
