package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageValues: a command line whose flags cannot be run together, or
// whose value a flag cannot take, exits with the usage status and says
// what is wrong and what the flag takes, never only "parse error".
func TestUsageValues(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"ApproveAndDeny", nil, []string{"prompt", "--approve-all", "--deny-all", "hello"},
			"--approve-all and --deny-all contradict each other; pass one of them"},
		{"EmptyPrompt", nil, []string{"prompt", " "},
			"the prompt is empty; say what the agent should do: sparkles prompt TEXT"},
		{"SinceWord", nil, []string{"events", "--since", "abc", "c_1"},
			`--since "abc" is not a whole number of 0 or more, e.g. --since 42; see ` + "`sparkles events --help`"},
		{"SinceNegative", nil, []string{"events", "--since=-3", "c_1"},
			`--since "-3" is not a whole number of 0 or more, e.g. --since 42; see ` + "`sparkles events --help`"},
		{"SinceHuge", nil, []string{"events", "--since", "99999999999999999999999", "c_1"},
			`--since "99999999999999999999999" is out of range for a whole number of 0 or more, e.g. --since 42; see ` + "`sparkles events --help`"},
		{"SinceEnv", map[string]string{"SPARKLES_EVENTS_SINCE": "abc"}, []string{"events", "c_1"},
			`SPARKLES_EVENTS_SINCE="abc" (--since) is not a whole number of 0 or more, e.g. --since 42; see ` + "`sparkles events --help`"},
		{"Duration", nil, []string{"serve", "--keepalive", "5"},
			`--keepalive "5" is not a duration with its unit (ms, s, m, h), e.g. --keepalive 30s; see ` + "`sparkles serve --help`"},
		{"Bool", nil, []string{"prompt", "--approve-all=maybe", "hello"},
			`--approve-all "maybe" is not true or false, e.g. --approve-all=true; see ` + "`sparkles prompt --help`"},
		{"Subcommand", nil, []string{"sandbox", "create", "--git-depth", "x"},
			`--git-depth "x" is not a whole number, e.g. --git-depth 10; see ` + "`sparkles sandbox create --help`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errw bytes.Buffer
			app := newApp()
			app.Writer, app.ErrWriter = &out, &errw
			err := app.Run(append([]string{"sparkles"}, tt.args...))
			code, print := exitStatus(err)
			if code != exitUsage || !print || err.Error() != tt.want {
				t.Fatalf("sparkles %s: exit %d, error %v\nwant exit %d and %q", strings.Join(tt.args, " "), code, err, exitUsage, tt.want)
			}
			if out.Len() != 0 || errw.Len() != 0 {
				t.Errorf("printed besides the error:\n%s%s", out.String(), errw.String())
			}
		})
	}
}
