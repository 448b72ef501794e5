package e2e

import (
	"strings"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// wantToolOutput checks the shell command's output in the turn: its last
// tool.output holds the line it printed and the sandbox's secret it printed
// redacted, ended with exit code 0, for an execute tool of the turn; or
// that there is none from an agent that sends no terminal output.
func (s *scenarioRun) wantToolOutput(turn string) {
	s.t.Helper()
	fs := s.sentOf(turn, sandbox.TypeToolOutput, s.a.sends.ToolOutput)
	if fs == nil {
		return
	}
	var o sandbox.ToolOutput
	mustDecode(s.t, fs[len(fs)-1], &o)
	if !strings.Contains(o.Text, fakemodel.ShellOutputLine+"\n") || !strings.Contains(o.Text, "[REDACTED]") ||
		strings.Contains(o.Text, "canary-7d1f0e9b2c") || o.Truncated || o.ExitCode == nil || *o.ExitCode != 0 {
		s.t.Errorf("last tool.output %q (truncated %v, exit %v), want %q and the canary [REDACTED], exit code 0",
			o.Text, o.Truncated, o.ExitCode, fakemodel.ShellOutputLine)
	}
	for _, f := range s.rec.of(turn, sandbox.TypeToolUpdated) {
		var tl sandbox.ToolUpdated
		mustDecode(s.t, f, &tl)
		if tl.ToolCallID == o.ToolCallID {
			if tl.Kind != sandbox.ToolKindExecute {
				s.t.Errorf("the output's tool %+v is not an execute tool", tl)
			}
			return
		}
	}
	s.t.Errorf("tool.output of %s, which no tool.updated of the turn names", o.ToolCallID)
}
