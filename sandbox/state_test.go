package sandbox_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestStateTurnUsage: turn.usage sets the running turn's usage, in the
// snapshot, the turn resource the fold returns and the sandbox's current
// turn, without touching a shallow clone; turn.completed's usage is the
// last word, and a turn.usage of another turn or after the end changes
// nothing.
func TestStateTurnUsage(t *testing.T) {
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	if snap := st.Snapshot(); snap.Turn.Usage != nil {
		t.Fatalf("snapshot turn usage %+v before any, want none", snap.Turn.Usage)
	}
	first := sandbox.Usage{ContextTokens: 100, ContextWindow: 1000, Cost: &sandbox.Cost{Amount: 0.01, Currency: "USD"}}
	turn, _ := st.Apply(&sandbox.Event{ID: 2, Type: sandbox.TypeTurnUsage, TurnID: "turn_1", Data: sandbox.TurnUsage{Usage: first}})
	if turn == nil || turn.Usage == nil || turn.Usage.ContextTokens != 100 {
		t.Fatalf("the fold returned the turn %+v, want it with its usage", turn)
	}
	old := st.ShallowCloneForFold()
	st.Apply(&sandbox.Event{ID: 3, Type: sandbox.TypeTurnUsage, TurnID: "turn_1",
		Data: &sandbox.TurnUsage{Usage: sandbox.Usage{ContextTokens: 200, ContextWindow: 1000, Cost: &sandbox.Cost{Amount: 0.02, Currency: "USD"}}}})
	snap := st.Snapshot()
	if u := snap.Turn.Usage; u == nil || u.ContextTokens != 200 || u.Cost == nil || u.Cost.Amount != 0.02 {
		t.Fatalf("snapshot turn usage %+v, want the last turn.usage", u)
	}
	if u := snap.Sandbox.CurrentTurn.Usage; u == nil || u.ContextTokens != 200 {
		t.Fatalf("current turn usage %+v, want the last turn.usage", u)
	}
	if got := old.Snapshot(); got.Turn.Usage.ContextTokens != 100 || got.Sandbox.CurrentTurn.Usage.ContextTokens != 100 {
		t.Fatalf("a clone taken before changed: turn %+v, current %+v", got.Turn.Usage, got.Sandbox.CurrentTurn.Usage)
	}
	c := st.Clone()
	st.Turn.Usage.Cost.Amount = 9
	if got := c.Turn.Usage.Cost.Amount; got != 0.02 {
		t.Fatalf("a clone shares its usage's cost: %v", got)
	}
	st.Apply(&sandbox.Event{ID: 4, Type: sandbox.TypeTurnUsage, TurnID: "turn_0", Data: &sandbox.TurnUsage{Usage: sandbox.Usage{ContextTokens: 7}}})
	if got := st.Turn.Usage.ContextTokens; got != 200 {
		t.Fatalf("another turn's turn.usage changed the turn: %d", got)
	}
	st.Apply(&sandbox.Event{ID: 5, Type: sandbox.TypeTurnCompleted, TurnID: "turn_1",
		Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, Usage: &sandbox.Usage{InputTokens: 5, OutputTokens: 6, TotalTokens: 11, ContextTokens: 300}}})
	if u := st.Turn.Usage; u == nil || u.TotalTokens != 11 || u.ContextTokens != 300 || u.Cost != nil {
		t.Fatalf("turn usage %+v after turn.completed, want its usage", u)
	}
	st.Apply(&sandbox.Event{ID: 6, Type: sandbox.TypeTurnUsage, TurnID: "turn_1", Data: &sandbox.TurnUsage{Usage: sandbox.Usage{ContextTokens: 7}}})
	if got := st.Turn.Usage.ContextTokens; got != 300 {
		t.Fatalf("a turn.usage after the end changed the turn: %d", got)
	}
}

// TestStateQueuedTurns: turn.queued puts a turn on the sandbox's queue,
// its turn.started takes it off as the current turn (created when it was
// queued), and a turn.completed of a turn that never started takes it
// off settled; a shallow clone's queue stays as it was.
func TestStateQueuedTurns(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	var st sandbox.State
	st.Apply(&sandbox.Event{ID: 1, Type: sandbox.TypeTurnStarted, TS: at(1), TurnID: "turn_1", Data: &sandbox.TurnStarted{}})
	for i, id := range []string{"turn_2", "turn_3"} {
		turn, _ := st.Apply(&sandbox.Event{ID: uint64(2 + i), Type: sandbox.TypeTurnQueued, TS: at(2 + i), TurnID: id,
			Data: &sandbox.TurnQueuedData{Input: sandbox.TextInput("next"), Position: i + 1}})
		if turn == nil || turn.ID != id || turn.Status != sandbox.TurnQueued {
			t.Fatalf("turn.queued returned %+v, want %s queued", turn, id)
		}
	}
	before := st.ShallowCloneForFold()
	if got, want := len(st.Sandbox.QueuedTurns), 2; got != want {
		t.Fatalf("%d queued turns, want %d", got, want)
	}
	turn, _ := st.Apply(&sandbox.Event{ID: 4, Type: sandbox.TypeTurnCompleted, TS: at(4), TurnID: "turn_3",
		Data: &sandbox.TurnCompleted{Status: sandbox.TurnCanceled, StopReason: sandbox.StopCanceled}})
	if turn == nil || turn.Status != sandbox.TurnCanceled || turn.CompletedAt == nil {
		t.Fatalf("completed queued turn %+v, want it canceled", turn)
	}
	if st.Sandbox.CurrentTurn == nil || st.Sandbox.CurrentTurn.ID != "turn_1" {
		t.Fatalf("current turn %+v, want turn_1 still", st.Sandbox.CurrentTurn)
	}
	st.Apply(&sandbox.Event{ID: 5, Type: sandbox.TypeTurnCompleted, TS: at(5), TurnID: "turn_1", Data: &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded}})
	st.Apply(&sandbox.Event{ID: 6, Type: sandbox.TypeTurnStarted, TS: at(6), TurnID: "turn_2", Data: &sandbox.TurnStarted{}})
	if st.Sandbox.QueuedTurns != nil {
		t.Fatalf("queued turns %+v, want none", st.Sandbox.QueuedTurns)
	}
	if cur := st.Sandbox.CurrentTurn; cur == nil || cur.ID != "turn_2" || !cur.CreatedAt.Equal(at(2)) {
		t.Fatalf("current turn %+v, want turn_2 created when it was queued", cur)
	}
	if got := len(before.Sandbox.QueuedTurns); got != 2 {
		t.Fatalf("the clone's queue changed to %d turns", got)
	}
}
