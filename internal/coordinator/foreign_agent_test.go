package coordinator_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	// The example agent of the ACP Go SDK is built from this module by the
	// test below: an agent nobody here wrote.
	_ "github.com/coder/acp-go-sdk"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestForeignAgent runs the ACP Go SDK's example agent as a registered agent
// (what `serve --agent example=PATH` does): its turn completes with tool
// updates and an approval, and nothing of its raw tool input, raw output or
// tool content reaches any event.
func TestForeignAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an external agent that paces its turn over a few seconds")
	}
	bin := filepath.Join(t.TempDir(), "acp-example-agent")
	build := exec.Command("go", "build", "-o", bin, "github.com/coder/acp-go-sdk/example/agent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the SDK's example agent: %v\n%s", err, out)
	}
	e := newEnv(t, func(c *coordinator.Config) { c.Agents["example"] = registry.Agent{Command: bin} })
	sb := e.create(sandbox.CreateParams{Agent: "example"})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "improve the config"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeApprovalRequested))
	appr := approvalOf(evs)
	if appr.Kind != sandbox.ToolKindEdit || len(appr.Options) != 2 {
		t.Fatalf("approval = %+v", appr)
	}
	if _, err := e.co.Decide(context.Background(), sb.ID, appr.ApprovalID, sandbox.Decision{Decision: "approve"}); err != nil {
		t.Fatal(err)
	}
	evs = append(evs, e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))...)
	if c := completed(evs); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn.completed = %+v; events %s", c, types(evs))
	}
	var tools int
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.ToolUpdated); ok {
			tools++
			if strings.HasPrefix(d.ToolCallID, "call_") {
				t.Fatalf("the agent's own toolCallId %q was forwarded", d.ToolCallID)
			}
		}
	}
	if tools == 0 {
		t.Fatalf("no tool.updated; events %s", types(evs))
	}
	recs, err := e.store.Read(context.Background(), sb.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, r := range recs {
		all.Write(r.JSON)
	}
	text := all.String()
	if !strings.Contains(text, "successfully updated the configuration") {
		t.Fatal("the agent's closing text is missing: the turn did not run to its end")
	}
	// rawInput, rawOutput and tool content of the example agent, and its
	// locations outside the sandbox directory.
	for _, leak := range []string{"new-host", "Configuration updated", "This is a sample project", "/project/", "/home/user", "sess_", "call_1", "call_2"} {
		if strings.Contains(text, leak) {
			t.Fatalf("%q from the agent's raw payloads appears in an event", leak)
		}
	}
}
