package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// testLongTurn: a turn of thousands of tool calls, each announced once as
// an agent does, costs each new one what the hundredth cost. The state
// keeps the tools still running and the most recent finished ones, the
// rest counted in tools_omitted, so appending, committing and storing an
// event do not grow with the turn: the bytes the store allocates for an
// append late in the turn are within a small factor of those early in it
// (a store that copies or re-encodes the whole tool list per append
// allocates dozens of times more by the end). The snapshot stays within
// its bound and the log keeps every event.
func testLongTurn(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := context.Background()
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_1", TS: T0, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("go")}})
	title := strings.Repeat("t", 200)
	tool := func(i int, status string) *sandbox.Event {
		return &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: "turn_1", TS: T0, Data: &sandbox.ToolUpdated{
			ToolCallID: fmt.Sprintf("tool_%06d", i), Title: title, Kind: "read", Status: status,
			Locations: []sandbox.Location{{Path: fmt.Sprintf("src/file_%06d.go", i)}},
		}}
	}
	// One tool keeps running the whole turn: it stays whatever the turn did.
	mustAppend(t, s, "c_1", tool(0, sandbox.ToolRunning))
	const total, step = 3001, 100
	// allocated returns the bytes the process allocated appending tools
	// from to from+step, one append each, as a producer writes them.
	allocated := func(from int) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := from; i < from+step; i++ {
			mustAppend(t, s, "c_1", tool(i, sandbox.ToolCompleted))
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var early, late uint64
	for from := 1; from < total; from += step {
		switch a := allocated(from); {
		case from == 1+2*step:
			early = a
		case from+step >= total:
			late = a
		}
	}
	t.Logf("bytes allocated by %d appends: %d at the 200th tool, %d at the %dth", step, early, late, total-step)
	if late > 3*early {
		t.Errorf("appending the last %d tools of the turn allocated %d bytes, the %d from the 200th %d: an append grows with the turn", step, late, step, early)
	}

	st, err := s.State(ctx, "c_1")
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, tl := range st.Tools {
		if sandbox.Finished(tl.Status) {
			finished++
		}
	}
	if finished < sandbox.KeptFinishedTools || finished > 2*sandbox.KeptFinishedTools {
		t.Errorf("the state keeps %d finished tools, want %d to %d", finished, sandbox.KeptFinishedTools, 2*sandbox.KeptFinishedTools)
	}
	if st.Tools[0].ToolCallID != "tool_000000" || st.Tools[0].Status != sandbox.ToolRunning {
		t.Errorf("the state's first tool is %+v, want the running tool_000000", st.Tools[0])
	}
	if last := st.Tools[len(st.Tools)-1].ToolCallID; last != fmt.Sprintf("tool_%06d", total-1) {
		t.Errorf("the state's last tool is %s, want the newest", last)
	}
	if got := len(st.Tools) + st.ToolsOmitted; got != total {
		t.Errorf("%d tools kept and %d omitted, want %d in all", len(st.Tools), st.ToolsOmitted, total)
	}
	snap := st.Snapshot()
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > sandbox.SnapshotMaxBytes || len(snap.Tools)+snap.ToolsOmitted != total || len(snap.Tools) < sandbox.KeptFinishedTools {
		t.Errorf("snapshot of %d bytes with %d tools and %d omitted, want at most %d bytes, %d in all, at least %d listed",
			len(b), len(snap.Tools), snap.ToolsOmitted, sandbox.SnapshotMaxBytes, total, sandbox.KeptFinishedTools)
	}
	if n := len(readAll(t, s, "c_1")); n != total+1 {
		t.Errorf("the log holds %d events, want %d", n, total+1)
	}
	// A new turn starts with no tools and nothing omitted.
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_2", TS: T0, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("again")}})
	if st, err = s.State(ctx, "c_1"); err != nil {
		t.Fatal(err)
	}
	if len(st.Tools) != 0 || st.ToolsOmitted != 0 {
		t.Errorf("a new turn's state has %d tools and %d omitted, want none", len(st.Tools), st.ToolsOmitted)
	}
}
