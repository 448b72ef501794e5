package cli

import (
	"testing"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestEventsSummaryToolOutput: a command's output reads as its tool, its
// exit code once it ended, and the end of what it printed, cut to the
// width.
func TestEventsSummaryToolOutput(t *testing.T) {
	code := 2
	for _, tt := range []struct {
		d     sandbox.ToolOutput
		width int
		want  string
	}{
		{sandbox.ToolOutput{ToolCallID: "tool_1", Text: "ok a\nok b\n"}, 200, "tool_1: ok a ok b"},
		{sandbox.ToolOutput{ToolCallID: "tool_1", Text: "building\nFAIL x_test.go\n", ExitCode: &code}, 200, "tool_1 exit 2: building FAIL x_test.go"},
		{sandbox.ToolOutput{ToolCallID: "tool_1", Text: "one two three four five\n"}, 20, "tool_1: …e four five"},
		{sandbox.ToolOutput{ToolCallID: "tool_1", Text: "\n", ExitCode: &code}, 200, "tool_1 exit 2: no output"},
	} {
		got := summary(sandbox.Event{Type: sandbox.TypeToolOutput, Data: &tt.d}, tt.width)
		if got != tt.want || utf8.RuneCountInString(got) > tt.width {
			t.Errorf("tool.output gist %q, want %q", got, tt.want)
		}
	}
}
