package fakemodel_test

import (
	"encoding/json"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
)

// TestScriptPlan: "plan" answers with the to-do tool call of PlanSteps,
// then, after its result, with text; a word that merely holds "plan" does
// not.
func TestScriptPlan(t *testing.T) {
	var s fakemodel.Script
	r := s.Next(fakemodel.Conversation{Prompt: "please plan the work"})
	if r.Text != fakemodel.PlanBeforeText || r.Tool == nil || r.Tool.Kind != "plan" || len(r.Tool.Plan) != 3 {
		t.Fatalf("first reply %+v, want text and a plan tool call of three steps", r)
	}
	if got := s.Next(fakemodel.Conversation{Prompt: "please plan the work", ToolResults: 1}); got.Tool != nil || got.Text != fakemodel.PlanAfterText {
		t.Fatalf("reply after the result %+v, want text", got)
	}
	if got := s.Next(fakemodel.Conversation{Prompt: "a planet"}); got.Text != fakemodel.PlainText {
		t.Fatalf("reply to %q = %+v, want the plain text", "a planet", got)
	}
}

// TestAnthropicPlan: the plan is a TodoWrite call whose todos are the
// steps, as Claude Code's tool takes them.
func TestAnthropicPlan(t *testing.T) {
	_, srv := startAnthropic(t)
	resp := anthropicPost(t, t.Context(), srv.URL+"/v1/messages", claudeRequest(true, false, claudeBuiltins, claudeFirstTurn("please plan the work")))
	defer resp.Body.Close()
	blocks, stop := anthropicAssemble(t, anthropicReadSSE(t, resp.Body, nil))
	last := blocks[len(blocks)-1]
	if stop != "tool_use" || last.name != "TodoWrite" {
		t.Fatalf("answer ends %s with %q, want a TodoWrite tool use", stop, last.name)
	}
	var in struct {
		Todos []struct{ Content, Status, ActiveForm string }
	}
	if err := json.Unmarshal([]byte(last.inputJSON), &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Todos) != len(fakemodel.PlanSteps) {
		t.Fatalf("todos %+v, want %+v", in.Todos, fakemodel.PlanSteps)
	}
	for i, st := range fakemodel.PlanSteps {
		if got := in.Todos[i]; got.Content != st.Content || got.Status != st.Status || got.ActiveForm == "" {
			t.Fatalf("todo %d = %+v, want %+v with an activeForm", i, got, st)
		}
	}
}
