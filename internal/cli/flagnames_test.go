package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestKeepNames: the app with names kept (appOf) is the app urfave/cli
// alone would run (plainAppOf). Every visible flag has its names kept, and
// the same ones; help, an unknown flag, an unknown subcommand and a value
// that does not parse, on the line or in the environment, print the same
// thing through both. The last goes through badValue, which tells a flag's
// kind by its type.
func TestKeepNames(t *testing.T) {
	plainApp := func() *cli.App {
		cmds := make([]*cli.Command, len(commands))
		for i, c := range commands {
			cmds[i] = c.new()
		}
		return plainAppOf(cmds)
	}
	// Each run has apps of its own: a run leaves state in its flags.
	same := func(t *testing.T, args []string) {
		t.Helper()
		want := runApp(plainApp(), args)
		if got := runApp(newApp(), args); got != want {
			t.Errorf("%s:\nwith names kept\n%s\nurfave/cli alone\n%s", strings.Join(args, " "), got, want)
		}
	}

	var typed int
	var walk func(path []string, k, p []*cli.Command)
	walk = func(path []string, k, p []*cli.Command) {
		for i, c := range k {
			pc := p[i]
			at := append(append([]string{"sparkles"}, path...), c.Name)
			for j, f := range c.Flags {
				pf := pc.Flags[j]
				if !slices.Equal(f.Names(), pf.Names()) {
					t.Errorf("%s: flag %d has names %q, want %q", strings.Join(at, " "), j, f.Names(), pf.Names())
				}
				_, wrapped := f.(interface{ base() cli.Flag })
				if v, ok := f.(cli.VisibleFlag); wrapped == (ok && !v.IsVisible()) {
					t.Errorf("%s --%s (%T): names kept %v, want them kept for every visible flag and no hidden one", strings.Join(at, " "), f.Names()[0], f, wrapped)
				}
				if !wrapped {
					continue
				}
				switch baseFlag(f).(type) {
				case *cli.BoolFlag, *cli.IntFlag, *cli.DurationFlag, *cli.Uint64Flag:
					typed++
					name := f.Names()[0]
					same(t, append(slices.Clone(at), "--"+name+"=not-a-value"))
					if ev := f.(interface{ GetEnvVars() []string }).GetEnvVars(); len(ev) > 0 {
						t.Run(ev[0], func(t *testing.T) {
							t.Setenv(ev[0], "not-a-value")
							same(t, at)
						})
					}
				}
			}
			same(t, append(slices.Clone(at), "--help"))
			same(t, append(slices.Clone(at), "--no-such-flag"))
			if len(c.Subcommands) > 0 {
				same(t, append(slices.Clone(at), "no-such-command"))
			}
			walk(at[1:], c.Subcommands, pc.Subcommands)
		}
	}
	walk(nil, newApp().Commands, plainApp().Commands)
	if typed == 0 {
		t.Fatal("no flag of a kind badValue tells apart was tried")
	}
}

// TestPositionalKeptNames: a boolean flag after a command's arguments
// takes no value with its names kept, as without: positional tells it by
// the type of the flag under the wrapper.
func TestPositionalKeptNames(t *testing.T) {
	var got string
	cmd := &cli.Command{
		Name:  "t",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}, &cli.StringFlag{Name: "since"}},
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 1)
			got = fmt.Sprintf("%q %v %q %v", args, c.Bool("json"), c.String("since"), err)
			return nil
		},
	}
	app := appOf([]*cli.Command{cmd})
	if _, ok := cmd.Flags[0].(interface{ base() cli.Flag }); !ok {
		t.Fatalf("the flag %T has no names kept", cmd.Flags[0])
	}
	if err := app.Run([]string{"sparkles", "t", "sbx_1", "--json", "--since", "5"}); err != nil {
		t.Fatal(err)
	}
	if want := `["sbx_1"] true "5" <nil>`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
