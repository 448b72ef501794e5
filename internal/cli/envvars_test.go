package cli

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestEveryFlagHasAnEnvVar: each flag of each command can also be set from
// the environment (SPARKLES_…), as the docs promise, so a script or a
// service file never needs a flag the environment cannot give.
func TestEveryFlagHasAnEnvVar(t *testing.T) {
	var walk func(path string, cmds []*cli.Command)
	check := func(path string, flags []cli.Flag) {
		for _, f := range flags {
			name := f.Names()[0]
			if name == "help" || name == "version" {
				continue
			}
			ev, ok := f.(interface{ GetEnvVars() []string })
			if !ok || len(ev.GetEnvVars()) == 0 {
				t.Errorf("sparkles %s --%s has no environment variable", path, name)
				continue
			}
			for _, v := range ev.GetEnvVars() {
				if !strings.HasPrefix(v, "SPARKLES_") {
					t.Errorf("sparkles %s --%s: environment variable %s does not start with SPARKLES_", path, name, v)
				}
			}
		}
	}
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			check(p, c.Flags)
			walk(p, c.Subcommands)
		}
	}
	app := newApp()
	check("", app.Flags)
	walk("", app.Commands)
}
