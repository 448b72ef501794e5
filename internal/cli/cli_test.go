package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestNewAppFor checks that the app built for one command runs it as the
// whole tree does: the table names every command by the name it has, and
// for each command and subcommand its help, an unknown flag and (for a
// group) an unknown subcommand print the same words and end the same way
// from both apps.
func TestNewAppFor(t *testing.T) {
	whole := newApp()
	if len(whole.Commands) != len(commands) {
		t.Fatalf("the tree has %d commands, the table %d", len(whole.Commands), len(commands))
	}
	for i, c := range whole.Commands {
		if c.Name != commands[i].name || len(c.Aliases) > 0 {
			t.Fatalf("command %d is %q (aliases %q), the table names it %q", i, c.Name, c.Aliases, commands[i].name)
		}
		if got := newAppFor([]string{"sparkles", c.Name}).Commands; len(got) != 1 || got[0].Name != c.Name {
			t.Fatalf("the app for %q has commands %v", c.Name, got)
		}
	}
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, path...), c.Name)
			tries := [][]string{{"--help"}, {"--no-such-flag"}}
			if len(c.Subcommands) > 0 {
				tries = append(tries, []string{"no-such-command"})
			}
			for _, try := range tries {
				args := append(append([]string{"sparkles"}, p...), try...)
				want := runApp(newApp(), args)
				if got := runApp(newAppFor(args), args); got != want {
					t.Errorf("%s:\nthe app for one command says\n%s\nthe whole tree says\n%s", strings.Join(args, " "), got, want)
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, whole.Commands)
	// A line that names no command gets the whole tree.
	for _, args := range [][]string{{"sparkles"}, {"sparkles", "--version"}, {"sparkles", "serv"}} {
		if got := len(newAppFor(args).Commands); got != len(commands) {
			t.Errorf("%q: an app of %d commands, want the whole tree", args, got)
		}
	}
}

// runApp runs app on args and says what it printed, the error and the
// exit status, for tests that compare two apps.
func runApp(app *cli.App, args []string) string {
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.Run(args)
	code, _ := exitStatus(err)
	return fmt.Sprintf("exit %d, error %v\nout:\n%s\nerr:\n%s", code, err, out.String(), errw.String())
}
