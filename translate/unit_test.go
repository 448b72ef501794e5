package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func scenario(t *testing.T, name string) string {
	t.Helper()
	for _, sc := range scenarios {
		if sc.name == name {
			return sc.script
		}
	}
	t.Fatalf("no scenario %q", name)
	return ""
}

func TestStats(t *testing.T) {
	for _, tt := range []struct {
		name       string
		dropped    map[string]int
		chunks     int
		redactions int
	}{
		{
			name: "UnknownAndIgnoredKinds",
			dropped: map[string]int{
				"plan_update": 1, "available_commands_update": 1,
				"user_message_chunk": 1, "brand_new_kind": 1, DropNonTextContent: 1,
			},
			chunks: 3,
		},
		{name: "Malformed", dropped: map[string]int{DropMalformed: 13}},
		{
			name:    "CodexExecWithAbsolutePaths",
			dropped: map[string]int{"available_commands_update": 1},
			chunks:  12,
		},
		{name: "OutsideTurn", dropped: map[string]int{DropOutsideTurn: 4}, chunks: 1},
		{
			name: "TokenShapesAndSecretsInEveryString",
			// input 1, text 1, title 2 (bearer token and secret),
			// paths 2, label 1.
			chunks: 2, redactions: 7,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newScripted(c, testSecret)
			run(t, tr, c, scenario(t, tt.name))
			st := tr.Stats()
			if tt.dropped == nil {
				tt.dropped = map[string]int{}
			}
			if got, want := fmt.Sprint(st.Dropped), fmt.Sprint(tt.dropped); got != want {
				t.Fatalf("Dropped = %s, want %s", got, want)
			}
			if got, want := st.Chunks, tt.chunks; got != want {
				t.Fatalf("Chunks = %d, want %d", got, want)
			}
			if got, want := st.Redactions, tt.redactions; got != want {
				t.Fatalf("Redactions = %d, want %d", got, want)
			}
		})
	}
	t.Run("CopyIsDetached", func(t *testing.T) {
		tr := New(Config{})
		tr.Update(json.RawMessage(`{}`))
		st := tr.Stats()
		st.Dropped[DropOutsideTurn] = 99
		if got, want := tr.Stats().Dropped[DropOutsideTurn], 1; got != want {
			t.Fatalf("Dropped[outside_turn] = %d, want %d", got, want)
		}
	})
	t.Run("UnknownKindsAreBounded", func(t *testing.T) {
		tr := New(Config{})
		tr.StartTurn("turn_1", nil)
		for i := range 1000 {
			tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"kind_%d"}}`, i)))
		}
		st := tr.Stats()
		if got, want := len(st.Dropped), maxDropKeys+1; got > want {
			t.Fatalf("len(Dropped) = %d, want at most %d", got, want)
		}
		total := 0
		for _, n := range st.Dropped {
			total += n
		}
		if got, want := total, 1000; got != want {
			t.Fatalf("total dropped = %d, want %d", got, want)
		}
	})
}

func TestEndTurn(t *testing.T) {
	for _, tt := range []struct {
		name   string
		r      TurnResult
		status string
		stop   string
		code   string
	}{
		{"EndTurn", TurnResult{StopReason: "end_turn"}, "succeeded", "end_turn", ""},
		{"MaxTokens", TurnResult{StopReason: "max_tokens"}, "succeeded", "max_tokens", ""},
		{"MaxTurnRequests", TurnResult{StopReason: "max_turn_requests"}, "succeeded", "max_turn_requests", ""},
		{"Refusal", TurnResult{StopReason: "refusal"}, "succeeded", "refusal", ""},
		{"AgentCancelled", TurnResult{StopReason: "cancelled"}, "canceled", "canceled", ""},
		{"UnknownReason", TurnResult{StopReason: "took_a_nap"}, "succeeded", "end_turn", ""},
		{"NoAnswer", TurnResult{}, "failed", "error", "internal"},
		{"CanceledDespiteEndTurn", TurnResult{StopReason: "end_turn", Canceled: true}, "canceled", "canceled", ""},
		{"CanceledWinsOverError", TurnResult{Canceled: true, Err: &sandbox.ErrorInfo{Code: "agent_exited"}}, "canceled", "canceled", ""},
		{"Failed", TurnResult{StopReason: "end_turn", Err: &sandbox.ErrorInfo{Code: "protocol_error", Message: "bad"}}, "failed", "error", "protocol_error"},
		// The server's stop cancels the turn and says so; a cancel of the
		// user's own is still a plain one.
		{"StoppedByServer", TurnResult{Stopped: &sandbox.ErrorInfo{Code: "server_stopped", Message: "stopped"}}, "canceled", "canceled", "server_stopped"},
		{"StoppedDespiteEndTurn", TurnResult{StopReason: "end_turn", Stopped: &sandbox.ErrorInfo{Code: "server_stopped"}}, "canceled", "canceled", "server_stopped"},
		{"StoppedWinsOverError", TurnResult{Stopped: &sandbox.ErrorInfo{Code: "server_stopped"}, Err: &sandbox.ErrorInfo{Code: "agent_exited"}}, "canceled", "canceled", "server_stopped"},
		{"CanceledWinsOverStopped", TurnResult{Canceled: true, Stopped: &sandbox.ErrorInfo{Code: "server_stopped"}}, "canceled", "canceled", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newScripted(c)
			tr.StartTurn("turn_1", nil)
			c.t = c.t.Add(1500 * time.Millisecond)
			evs := tr.EndTurn(tt.r)
			if got, want := len(evs), 1; got != want {
				t.Fatalf("len(events) = %d, want %d", got, want)
			}
			d := evs[0].Data.(*sandbox.TurnCompleted)
			if got, want := d.Status, tt.status; got != want {
				t.Fatalf("status = %q, want %q", got, want)
			}
			if got, want := d.StopReason, tt.stop; got != want {
				t.Fatalf("stop_reason = %q, want %q", got, want)
			}
			code := ""
			if d.Error != nil {
				code = d.Error.Code
			}
			if got, want := code, tt.code; got != want {
				t.Fatalf("error code = %q, want %q", got, want)
			}
			if got, want := d.DurationMS, int64(1500); got != want {
				t.Fatalf("duration_ms = %d, want %d", got, want)
			}
			if got, want := tr.InTurn(), false; got != want {
				t.Fatalf("InTurn = %v, want %v", got, want)
			}
			if got := tr.EndTurn(tt.r); len(got) != 0 {
				t.Fatalf("second EndTurn = %d events, want none", len(got))
			}
		})
	}
	t.Run("StoppedMessage", func(t *testing.T) {
		tr := newScripted(&clock{t: epoch})
		tr.StartTurn("turn_1", nil)
		msg := "the server stopped during the turn; send the prompt again to go on"
		d := tr.EndTurn(TurnResult{Stopped: &sandbox.ErrorInfo{Code: sandbox.ErrServerStopped, Message: msg}})[0].Data.(*sandbox.TurnCompleted)
		if d.Error == nil || d.Error.Message != msg {
			t.Fatalf("error = %+v, want message %q", d.Error, msg)
		}
	})
	t.Run("Usage", func(t *testing.T) {
		tr := newScripted(&clock{t: epoch})
		tr.StartTurn("turn_1", nil)
		u := &sandbox.Usage{InputTokens: 1, OutputTokens: 2, TotalTokens: 3}
		d := tr.EndTurn(TurnResult{StopReason: "end_turn", Usage: u})[0].Data.(*sandbox.TurnCompleted)
		if d.Usage == nil || *d.Usage != *u {
			t.Fatalf("usage = %+v, want %+v", d.Usage, u)
		}
	})
	// usage_update carries the context window (used, size) and a session
	// cost, not the tokens a turn spent: it must not pass for them.
	// usage_update carries the context window (used, size), not the tokens a
	// turn spent: it fills the context fields of the turn's usage and never
	// the token counts, which come from the prompt answer alone.
	t.Run("UsageUpdateIsContext", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			r       TurnResult
			updates bool
			want    *sandbox.Usage
		}{
			{"WithoutAnswerUsage", TurnResult{StopReason: "end_turn"}, true, &sandbox.Usage{ContextTokens: 53000, ContextWindow: 200000, Cost: &sandbox.Cost{Amount: 0.045, Currency: "USD"}}},
			{"AnswerUsageKept", TurnResult{StopReason: "end_turn", Usage: &sandbox.Usage{InputTokens: 3, OutputTokens: 40, TotalTokens: 1243}}, true, &sandbox.Usage{InputTokens: 3, OutputTokens: 40, TotalTokens: 1243, ContextTokens: 53000, ContextWindow: 200000, Cost: &sandbox.Cost{Amount: 0.045, Currency: "USD"}}},
			{"NoUsageAtAll", TurnResult{StopReason: "end_turn"}, false, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tr := newScripted(&clock{t: epoch})
				tr.StartTurn("turn_0", nil)
				// A usage_update of an earlier turn says nothing of this one.
				tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"usage_update","used":7,"size":8}}`))
				tr.EndTurn(TurnResult{StopReason: "end_turn"})
				tr.StartTurn("turn_1", nil)
				if tt.updates {
					tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"usage_update","used":1000,"size":200000}}`))
					tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"usage_update","used":53000,"size":200000,"cost":{"amount":0.045,"currency":"USD"}}}`))
				}
				evs := tr.EndTurn(tt.r)
				d := evs[len(evs)-1].Data.(*sandbox.TurnCompleted)
				if got, want := string(mustJSON(t, d.Usage)), string(mustJSON(t, tt.want)); got != want {
					t.Fatalf("usage = %s, want %s", got, want)
				}
			})
		}
	})
	t.Run("GeneratedTurnID", func(t *testing.T) {
		tr := newScripted(&clock{t: epoch})
		evs := tr.StartTurn("", nil)
		if got, want := evs[0].TurnID, "turn_1"; got != want {
			t.Fatalf("turn_id = %q, want %q", got, want)
		}
		if got, want := string(mustJSON(t, evs[0].Data)), `{"input":[]}`; got != want {
			t.Fatalf("data = %s, want %s", got, want)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestResolveApproval(t *testing.T) {
	const perm = `{"sessionId":"sess-secret-1","toolCall":{"toolCallId":"agent-secret-id-t1","title":"rm"},"options":[` +
		`{"optionId":"a1","name":"Allow","kind":"allow_once"},{"optionId":"a2","name":"Always","kind":"allow_always"},` +
		`{"optionId":"r1","name":"Reject","kind":"reject_once"},{"optionId":"r2","name":"Never","kind":"reject_always"}]}`
	for _, tt := range []struct {
		name                       string
		decision, option, reason   string
		wantDecision, wantOption   string
		wantReason, wantAgent, err string
		cancelled                  bool
	}{
		{name: "OK", decision: "approved", wantDecision: "approved", wantOption: "opt_1", wantReason: "user", wantAgent: "a1"},
		{name: "DeniedPicksFirstReject", decision: "denied", wantDecision: "denied", wantOption: "opt_3", wantReason: "user", wantAgent: "r1"},
		{name: "ApprovedWithOption", decision: "approved", option: "opt_2", wantDecision: "approved", wantOption: "opt_2", wantReason: "user", wantAgent: "a2"},
		{name: "OptionAlone", option: "opt_4", wantDecision: "denied", wantOption: "opt_4", wantReason: "user", wantAgent: "r2"},
		{name: "Timeout", decision: "canceled", option: "opt_1", reason: "timeout", wantDecision: "canceled", wantReason: "timeout", cancelled: true},
		{name: "Failed", decision: "failed", reason: "agent_exited", wantDecision: "failed", wantReason: "agent_exited", cancelled: true},
		{name: "ErrInvalidRequestMismatch", decision: "approved", option: "opt_3", err: sandbox.EInvalidRequest},
		{name: "ErrInvalidRequestUnknownOption", decision: "approved", option: "opt_9", err: sandbox.EInvalidRequest},
		{name: "ErrInvalidRequestDecision", decision: "maybe", err: sandbox.EInvalidRequest},
		{name: "ErrInvalidRequestNothing", err: sandbox.EInvalidRequest},
		{name: "ErrInvalidRequestReason", decision: "approved", reason: "whim", err: sandbox.EInvalidRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newScripted(c)
			tr.StartTurn("turn_1", nil)
			p, _ := tr.RequestPermission(json.RawMessage(perm))
			if got, want := len(tr.Pending()), 1; got != want {
				t.Fatalf("len(Pending) = %d, want %d", got, want)
			}
			out, evs, err := tr.ResolveApproval(p.ApprovalID, tt.decision, tt.option, tt.reason)
			if tt.err != "" {
				if got, want := sandbox.ErrorType(err), tt.err; got != want {
					t.Fatalf("error type = %q (%v), want %q", got, err, want)
				}
				if got, want := len(tr.Pending()), 1; got != want {
					t.Fatalf("len(Pending) after error = %d, want %d", got, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := out, (AgentOutcome{Cancelled: tt.cancelled, OptionID: tt.wantAgent}); got != want {
				t.Fatalf("outcome = %+v, want %+v", got, want)
			}
			d := evs[0].Data.(*sandbox.ApprovalResolved)
			if got, want := *d, (sandbox.ApprovalResolved{ApprovalID: p.ApprovalID, Decision: tt.wantDecision, OptionID: tt.wantOption, Reason: tt.wantReason}); got != want {
				t.Fatalf("resolved = %+v, want %+v", got, want)
			}
			if got, want := len(tr.Pending()), 0; got != want {
				t.Fatalf("len(Pending) = %d, want %d", got, want)
			}
		})
	}
	// Claude Code and Gemini CLI list allow_always first: a plain decision
	// must still grant or refuse one use only.
	t.Run("OnceBeforeAlways", func(t *testing.T) {
		for _, tt := range []struct {
			name, options, decision, wantAgent string
		}{
			{"AlwaysFirst", `{"optionId":"aa","name":"Always","kind":"allow_always"},{"optionId":"a1","name":"Once","kind":"allow_once"},{"optionId":"ra","name":"Never","kind":"reject_always"},{"optionId":"r1","name":"No","kind":"reject_once"}`, "approved", "a1"},
			{"RejectAlwaysFirst", `{"optionId":"aa","name":"Always","kind":"allow_always"},{"optionId":"a1","name":"Once","kind":"allow_once"},{"optionId":"ra","name":"Never","kind":"reject_always"},{"optionId":"r1","name":"No","kind":"reject_once"}`, "denied", "r1"},
			{"OnlyAlways", `{"optionId":"aa","name":"Always","kind":"allow_always"},{"optionId":"r1","name":"No","kind":"reject_once"}`, "approved", "aa"},
			{"OnlyRejectAlways", `{"optionId":"a1","name":"Once","kind":"allow_once"},{"optionId":"ra","name":"Never","kind":"reject_always"}`, "denied", "ra"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tr := newScripted(&clock{t: epoch})
				tr.StartTurn("turn_1", nil)
				p, _ := tr.RequestPermission(json.RawMessage(`{"sessionId":"s","toolCall":{"toolCallId":"t","title":"Write"},"options":[` + tt.options + `]}`))
				out, _, err := tr.ResolveApproval(p.ApprovalID, tt.decision, "", "")
				if err != nil {
					t.Fatal(err)
				}
				if got, want := out.OptionID, tt.wantAgent; got != want {
					t.Fatalf("agent option = %q, want %q", got, want)
				}
			})
		}
	})
	t.Run("PendingIsACopy", func(t *testing.T) {
		tr := newScripted(&clock{t: epoch})
		tr.StartTurn("turn_1", nil)
		p, _ := tr.RequestPermission(json.RawMessage(perm))
		p.AgentOptions["opt_1"] = "changed"
		tr.Pending()[0].AgentOptions["opt_1"] = "changed"
		out, _, err := tr.ResolveApproval(p.ApprovalID, "approved", "", "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := out.OptionID, "a1"; got != want {
			t.Fatalf("option = %q, want %q", got, want)
		}
	})
	t.Run("ErrApprovalResolvedAcrossTurns", func(t *testing.T) {
		tr := newScripted(&clock{t: epoch})
		tr.StartTurn("turn_1", nil)
		p, _ := tr.RequestPermission(json.RawMessage(perm))
		tr.EndTurn(TurnResult{Canceled: true})
		tr.StartTurn("turn_2", nil)
		_, _, err := tr.ResolveApproval(p.ApprovalID, "approved", "", "")
		if got, want := sandbox.ErrorType(err), sandbox.EApprovalResolved; got != want {
			t.Fatalf("error type = %q, want %q", got, want)
		}
	})
}

func TestError(t *testing.T) {
	tr := newScripted(&clock{t: epoch}, testSecret)
	for _, tt := range []struct{ code, msg, wantCode, wantMsg string }{
		{"agent_start_failed", "cannot start", "agent_start_failed", "cannot start"},
		{"coordinator_restarted", "restarted with hunter2-supersecret-value", "coordinator_restarted", "restarted with [REDACTED]"},
		{"made_up", "x", "internal", "x"},
		{"internal", strings.Repeat("é", 2000), "internal", strings.Repeat("é", 510) + "…"},
	} {
		d := tr.Error(tt.code, tt.msg)[0].Data.(*sandbox.SandboxError)
		if got, want := *d, (sandbox.SandboxError{Code: tt.wantCode, Message: tt.wantMsg}); got != want {
			t.Fatalf("Error(%q) = %+v, want %+v", tt.code, got, want)
		}
	}
	tr.StartTurn("turn_1", nil)
	if got, want := tr.Error("internal", "x")[0].TurnID, "turn_1"; got != want {
		t.Fatalf("turn_id = %q, want %q", got, want)
	}
}

func TestRelPath(t *testing.T) {
	tr := New(Config{Dir: "/srv/sb/"})
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"/srv/sb/a.go", "a.go", true},
		{"/srv/sb/pkg/../b.go", "b.go", true},
		{"/srv/sb", ".", true},
		{"src/c.go", "src/c.go", true},
		{"./src//d.go", "src/d.go", true},
		{"/srv/sb/../other/e.go", "", false},
		{"/srv/sb2/f.go", "", false},
		{"/etc/passwd", "", false},
		{"../g.go", "", false},
		{"a/../../h.go", "", false},
		{"..", "", false},
		{"", "", false},
		{"/srv/sb/nul\x00", "", false},
	} {
		got, ok := tr.relPath(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Fatalf("relPath(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := New(Config{}).relPath("/srv/sb/a.go"); ok {
		t.Fatalf("relPath without Dir kept a location")
	}
}

func TestFlushInterval(t *testing.T) {
	t.Run("Configured", func(t *testing.T) {
		c := &clock{t: epoch}
		tr := New(Config{Now: c.Now, FlushInterval: 200 * time.Millisecond})
		tr.StartTurn("turn_1", nil)
		tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"one "}}}`))
		c.t = c.t.Add(100 * time.Millisecond)
		if got := tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"two "}}}`)); len(got) != 0 {
			t.Fatalf("update within the interval emitted %d events", len(got))
		}
		at, ok := tr.NextFlush()
		if got, want := at, epoch.Add(200*time.Millisecond); !ok || !got.Equal(want) {
			t.Fatalf("NextFlush = %v, %v, want %v, true", got, ok, want)
		}
		if got := tr.Flush(); len(got) != 0 {
			t.Fatalf("early Flush emitted %d events", len(got))
		}
		c.t = at
		evs := tr.Flush()
		if got, want := len(evs), 1; got != want {
			t.Fatalf("Flush emitted %d events, want %d", got, want)
		}
		if got, want := evs[0].Data.(*sandbox.MessageUpdated).Text, "one two "; got != want {
			t.Fatalf("text = %q, want %q", got, want)
		}
	})
	t.Run("GrowsWithBigParts", func(t *testing.T) {
		c := &clock{t: epoch}
		tr := New(Config{Now: c.Now})
		tr.StartTurn("turn_1", nil)
		big := strings.Repeat("lorem ipsum ", 3*bigPart/12+1)
		tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}`, big)))
		tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"more"}}}`))
		at, ok := tr.NextFlush()
		if got, want := at, epoch.Add(3*DefaultFlushInterval); !ok || !got.Equal(want) {
			t.Fatalf("NextFlush = %v, %v, want %v, true", got, ok, want)
		}
	})
}

func TestTruncation(t *testing.T) {
	c := &clock{t: epoch}
	tr := New(Config{Now: c.Now, Secrets: []string{testSecret}})
	tr.StartTurn("turn_1", nil)
	// The part fills up exactly where the secret starts, so only its first
	// bytes make it in: they must not show in the final text.
	head := strings.Repeat("a", MaxPartBytes-4)
	tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}`, head+" "+testSecret+" tail")))
	tr.Update(json.RawMessage(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"dropped"}}}`))
	evs := tr.EndTurn(TurnResult{StopReason: "end_turn"})
	var done *sandbox.MessageCompleted
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.MessageCompleted); ok {
			done = d
		}
	}
	if done == nil {
		t.Fatal("no message.completed")
	}
	if got, want := done.Text, head+" "; got != want {
		t.Fatalf("text ends %q, want %q", got[len(got)-8:], want[len(want)-8:])
	}
	if got, want := tr.Stats().Dropped[DropTruncated], 2; got != want {
		t.Fatalf("Dropped[truncated] = %d, want %d", got, want)
	}
}

func TestNothingForwardedOutsideAllowList(t *testing.T) {
	// Every key of every event's data must be one the contract names.
	allowed := map[string]bool{}
	for _, k := range strings.Fields(`input type text status stop_reason error code message duration_ms usage
		input_tokens output_tokens total_tokens context_tokens context_window message_id part_id index kind parts tool_call_id title
		locations path line approval_id options option_id label expires_at decision reason
		changes added modified deleted files change truncated turn_id
		entries content priority amount currency cost`) {
		allowed[k] = true
	}
	for _, sc := range scenarios {
		c := &clock{t: epoch}
		_, evs := play(t, newScripted(c, testSecret), c, sc.script)
		for _, ev := range evs {
			checkKeys(t, ev.Type, mustJSON(t, ev.Data), allowed)
		}
	}
}

func checkKeys(t *testing.T, typ sandbox.Type, b []byte, allowed map[string]bool) {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !allowed[k] {
					t.Fatalf("%s carries key %q: %s", typ, k, b)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
}

func TestFinalMessage(t *testing.T) {
	type mu = sandbox.MessageUpdated
	text := func(msg, part, s string) mu { return mu{MessageID: msg, PartID: part, Kind: sandbox.PartText, Text: s} }
	think := func(msg, part, s string) mu {
		return mu{MessageID: msg, PartID: part, Kind: sandbox.PartReasoning, Text: s}
	}
	for _, tt := range []struct {
		name     string
		parts    []mu
		wantID   string // "" for no message.completed
		wantText string
		wantN    int // parts
	}{
		{name: "None"},
		{name: "ReasoningOnly", parts: []mu{think("m1", "p1", "hmm")}},
		{name: "BlankOnly", parts: []mu{text("m1", "p1", " \n\t"), text("m2", "p2", "")}},
		{name: "One", parts: []mu{text("m1", "p1", "Hello\n")}, wantID: "m1", wantText: "Hello\n", wantN: 1},
		{
			name:   "JoinsWithABlankLine",
			parts:  []mu{think("m1", "p1", "plan"), text("m1", "p2", "I will create notes.txt now."), text("m1", "p3", "Done: I wrote notes.txt.")},
			wantID: "m1", wantText: "I will create notes.txt now.\n\nDone: I wrote notes.txt.", wantN: 3,
		},
		{
			name:   "OneBlankLineWhateverTheNewlines",
			parts:  []mu{text("m1", "p1", "\nfirst\n\n"), text("m1", "p2", "\r\nsecond\n"), text("m1", "p3", "\n"), text("m1", "p4", "third")},
			wantID: "m1", wantText: "\nfirst\n\nsecond\n\nthird", wantN: 4,
		},
		{
			name:   "LastMessageWithText",
			parts:  []mu{text("m1", "p1", "before"), think("m2", "p2", "thinking"), text("m2", "p3", "after"), text("m3", "p4", "\n"), think("m4", "p5", "more")},
			wantID: "m2", wantText: "after", wantN: 2,
		},
		{
			name:   "MessageResumed",
			parts:  []mu{text("m1", "p1", "a"), text("m2", "p2", "b"), text("m1", "p3", "c")},
			wantID: "m1", wantText: "a\n\nc", wantN: 2,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := FinalMessage(tt.parts)
			if tt.wantID == "" {
				if done != nil {
					t.Fatalf("FinalMessage = %+v, want none", done)
				}
				return
			}
			if done == nil {
				t.Fatal("FinalMessage = nil")
			}
			if got, want := done.MessageID, tt.wantID; got != want {
				t.Fatalf("message_id = %q, want %q", got, want)
			}
			if got, want := done.Text, tt.wantText; got != want {
				t.Fatalf("text = %q, want %q", got, want)
			}
			if got, want := len(done.Parts), tt.wantN; got != want {
				t.Fatalf("len(parts) = %d, want %d", got, want)
			}
		})
	}
}

// TestOneMessageCompletedPerTurn runs every scenario and checks the rule of docs/events.md
// on each turn: at most one message.completed, never with blank text, and
// one whenever the turn showed text.
func TestOneMessageCompletedPerTurn(t *testing.T) {
	for _, sc := range scenarios {
		c := &clock{t: epoch}
		_, evs := play(t, newScripted(c, testSecret), c, sc.script)
		completed := map[string]int{}
		shown := map[string]bool{}
		for _, ev := range evs {
			switch d := ev.Data.(type) {
			case *sandbox.MessageCompleted:
				completed[ev.TurnID]++
				if strings.TrimSpace(d.Text) == "" {
					t.Fatalf("%s: message.completed with blank text: %+v", sc.name, d)
				}
			case *sandbox.MessageUpdated:
				if d.Kind == sandbox.PartText && strings.TrimSpace(d.Text) != "" {
					shown[ev.TurnID] = true
				}
			}
		}
		for turn, n := range completed {
			if n > 1 {
				t.Fatalf("%s: %s has %d message.completed", sc.name, turn, n)
			}
		}
		for turn := range shown {
			if completed[turn] != 1 {
				t.Fatalf("%s: %s showed text but has no message.completed", sc.name, turn)
			}
		}
	}
}

// TestChangesRedacted: a turn's changes name files as they are, but a
// path holding a secret shows it redacted, as every string does.
func TestChangesRedacted(t *testing.T) {
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	tr.StartTurn("turn_1", nil)
	evs := tr.EndTurn(TurnResult{StopReason: "end_turn", Changes: &sandbox.Changes{Added: 2, Files: []sandbox.FileChange{
		{Path: "keys/" + testSecret + ".txt", Change: sandbox.ChangeAdded}, {Path: "notes.txt", Change: sandbox.ChangeAdded},
	}}})
	done := evs[len(evs)-1].Data.(*sandbox.TurnCompleted)
	if done.Changes == nil || done.Changes.Added != 2 || len(done.Changes.Files) != 2 {
		t.Fatalf("changes = %+v", done.Changes)
	}
	if p := done.Changes.Files[0].Path; strings.Contains(p, testSecret) || !strings.Contains(p, "[REDACTED]") {
		t.Fatalf("a secret in a path: %q", p)
	}
	if p := done.Changes.Files[1].Path; p != "notes.txt" {
		t.Fatalf("a plain path became %q", p)
	}
}

// TestPlanBound: a plan of more than MaxPlanEntries entries is cut to
// them, and the cut is counted.
func TestPlanBound(t *testing.T) {
	entries := make([]string, 150)
	for i := range entries {
		entries[i] = fmt.Sprintf(`{"content":"step %d","priority":"medium","status":"pending"}`, i)
	}
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	_, evs := play(t, tr, c, "start turn_1 plan it\n"+
		`update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"plan","entries":[`+strings.Join(entries, ",")+`]}}`+"\nend end_turn\n")
	var plan *sandbox.PlanUpdated
	for _, ev := range evs {
		if p, ok := ev.Data.(*sandbox.PlanUpdated); ok {
			plan = p
		}
	}
	if plan == nil || len(plan.Entries) != MaxPlanEntries || plan.Entries[99].Content != "step 99" {
		t.Fatalf("plan = %+v, want its first %d entries", plan, MaxPlanEntries)
	}
	if n := tr.Stats().Dropped[DropPlanEntries]; n != 1 {
		t.Fatalf("dropped[%s] = %d, want 1", DropPlanEntries, n)
	}
}

// TestForgetsFinishedTools: what the translator holds of a turn does not
// grow with its tools: it forgets the oldest finished ones, and still
// settles the one left running at the end.
func TestForgetsFinishedTools(t *testing.T) {
	c := &clock{t: epoch}
	tr := newScripted(c, testSecret)
	var b strings.Builder
	b.WriteString("start turn_1 go\n")
	b.WriteString(`update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-run","title":"Run","kind":"execute","status":"in_progress"}}` + "\n")
	for i := range 5000 {
		fmt.Fprintf(&b, `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-%d","title":"Read","kind":"read","status":"completed"}}`+"\n", i)
	}
	out, _ := play(t, tr, c, b.String())
	if n := len(tr.tools); n > 2*keptFinishedTools+1 {
		t.Fatalf("the translator holds %d tools after 5,001, want at most %d", n, 2*keptFinishedTools+1)
	}
	out, _ = play(t, tr, c, "end end_turn\n")
	if len(out) < 2 || !strings.Contains(out[0], `"tool_call_id":"tool_1","title":"Run","kind":"execute","status":"completed"`) {
		t.Fatalf("the end settled %q, want the running tool_1 completed first", out)
	}
}
