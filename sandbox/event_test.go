package sandbox_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

var ts = time.Date(2026, 8, 6, 12, 0, 0, 0, time.UTC)

func TestEnvelope(t *testing.T) {
	t.Run("Durable", func(t *testing.T) {
		ev := sandbox.Event{
			ID: 1042, Type: sandbox.TypeMessageUpdated, TS: ts.Add(123456 * time.Microsecond),
			SandboxID: "c_01jx4d8m2q7r0v5b3n6k9p1w2z", TurnID: "turn_01jx4d9a1b2c3d4e5f6g7h8j9k",
			Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Index: 0, Kind: sandbox.PartText, Text: "Hello"},
		}
		got, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"id":"1042","object":"sandbox.event","version":"v1","type":"message.updated","ts":"2026-08-06T12:00:00.123Z","sandbox_id":"c_01jx4d8m2q7r0v5b3n6k9p1w2z","turn_id":"turn_01jx4d9a1b2c3d4e5f6g7h8j9k","data":{"message_id":"msg_1","part_id":"part_1","index":0,"kind":"text","text":"Hello"}}`
		if string(got) != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("Transient", func(t *testing.T) {
		ev := sandbox.Event{Type: sandbox.TypeSandboxStatus, TS: ts.In(time.FixedZone("x", 3600)), SandboxID: "c_1",
			Data: sandbox.SandboxStatus{Status: sandbox.StatusBooting, Detail: "starting"}}
		got, _ := json.Marshal(ev)
		want := `{"id":null,"object":"sandbox.event","version":"v1","type":"sandbox.status","ts":"2026-08-06T12:00:00.000Z","sandbox_id":"c_1","turn_id":null,"data":{"status":"booting","detail":"starting"}}`
		if string(got) != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("Escapes", func(t *testing.T) {
		b := sandbox.AppendEnvelope(nil, 1, "x\"y", ts, "c_<1>", "", nil)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("invalid JSON %s: %v", b, err)
		}
		if got, want := v["type"], "x\"y"; got != want {
			t.Fatalf("type = %v, want %v", got, want)
		}
	})
}

func TestEventRoundTrip(t *testing.T) {
	line := 7
	events := []sandbox.Event{
		{ID: 1, Type: sandbox.TypeTurnStarted, TS: ts, SandboxID: "c_1", TurnID: "turn_1", Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}},
		{ID: 2, Type: sandbox.TypeToolUpdated, TS: ts, SandboxID: "c_1", TurnID: "turn_1", Data: &sandbox.ToolUpdated{ToolCallID: "tool_1", Title: "Read", Kind: "read", Status: "running", Locations: []sandbox.Location{{Path: "a.go", Line: &line}}}},
		{ID: 3, Type: sandbox.TypeApprovalRequested, TS: ts, SandboxID: "c_1", TurnID: "turn_1", Data: &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_1", Title: "Write", Kind: "edit", Options: []sandbox.Option{{OptionID: "opt_1", Kind: "allow_once", Label: "Allow"}}, ExpiresAt: ts.Add(time.Minute)}},
		{ID: 4, Type: sandbox.TypeTurnCompleted, TS: ts, SandboxID: "c_1", TurnID: "turn_1", Data: &sandbox.TurnCompleted{Status: "succeeded", StopReason: "end_turn", DurationMS: 5}},
	}
	for _, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var got sandbox.Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(got, ev) {
			t.Fatalf("round trip of %s:\ngot  %#v\nwant %#v", b, got, ev)
		}
	}
}

func TestSeqJSON(t *testing.T) {
	b, _ := json.Marshal(sandbox.Snapshot{LastEventID: 12})
	var v map[string]any
	json.Unmarshal(b, &v)
	if got, want := v["last_event_id"], "12"; got != want {
		t.Fatalf("last_event_id = %#v, want %#v", got, want)
	}
	var s sandbox.Seq
	if err := json.Unmarshal([]byte(`"x"`), &s); err == nil {
		t.Fatal("want an error for a non-numeric id")
	}
}

func TestStateApply(t *testing.T) {
	var st sandbox.State
	apply := func(id uint64, typ sandbox.Type, data any) (*sandbox.Turn, *sandbox.Approval) {
		return st.Apply(&sandbox.Event{ID: id, Type: typ, TS: ts, SandboxID: "c_1", TurnID: "turn_1", Data: data})
	}
	if turn, _ := apply(1, sandbox.TypeTurnStarted, &sandbox.TurnStarted{Input: sandbox.TextInput("go")}); turn == nil || turn.Status != sandbox.TurnRunning {
		t.Fatalf("turn.started gave %+v", turn)
	}
	if st.Sandbox.CurrentTurn == nil {
		t.Fatal("no current turn after turn.started")
	}
	apply(2, sandbox.TypeMessageUpdated, &sandbox.MessageUpdated{PartID: "part_1", Text: "a"})
	apply(3, sandbox.TypeMessageUpdated, &sandbox.MessageUpdated{PartID: "part_1", Text: "ab"})
	apply(4, sandbox.TypeToolUpdated, &sandbox.ToolUpdated{ToolCallID: "tool_1", Status: "pending"})
	apply(5, sandbox.TypeToolUpdated, &sandbox.ToolUpdated{ToolCallID: "tool_1", Status: "completed"})
	if _, a := apply(6, sandbox.TypeApprovalRequested, &sandbox.ApprovalRequested{ApprovalID: "appr_1"}); a == nil || a.Status != sandbox.ApprovalPending {
		t.Fatalf("approval.requested gave %+v", a)
	}
	if got, want := len(st.Approvals), 1; got != want {
		t.Fatalf("pending approvals = %d, want %d", got, want)
	}
	if _, a := apply(7, sandbox.TypeApprovalResolved, &sandbox.ApprovalResolved{ApprovalID: "appr_1", Decision: "approved", OptionID: "opt_1"}); a == nil || *a.Decision != "approved" {
		t.Fatalf("approval.resolved gave %+v", a)
	}
	turn, _ := apply(8, sandbox.TypeTurnCompleted, &sandbox.TurnCompleted{Status: "succeeded", StopReason: "end_turn"})
	if turn == nil || turn.Status != "succeeded" || turn.CompletedAt == nil || *turn.StopReason != "end_turn" {
		t.Fatalf("turn.completed gave %+v", turn)
	}
	if got, want := len(st.Messages), 1; got != want {
		t.Fatalf("parts = %d, want %d", got, want)
	}
	if got, want := st.Messages[0].Text, "ab"; got != want {
		t.Fatalf("part text = %q, want %q", got, want)
	}
	if got, want := st.Tools[0].Status, "completed"; got != want {
		t.Fatalf("tool status = %q, want %q", got, want)
	}
	if st.Sandbox.CurrentTurn != nil || len(st.Approvals) != 0 {
		t.Fatalf("after completion: current turn %v, approvals %v", st.Sandbox.CurrentTurn, st.Approvals)
	}
	if got, want := st.Sandbox.LastEventID, sandbox.Seq(8); got != want {
		t.Fatalf("last_event_id = %d, want %d", got, want)
	}
}
