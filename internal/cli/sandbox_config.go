package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func newSandboxConfigCommand() *cli.Command {
	return &cli.Command{
		Name:      "config",
		Usage:     "show a sandbox's agent mode and model and the choices it offers; with --mode or --model, switch them between turns",
		ArgsUsage: "ID",
		Flags: clientFlags(
			&cli.StringFlag{Name: "mode", EnvVars: []string{"SPARKLES_SANDBOX_MODE"}, Usage: "switch the agent to this mode (one of the modes it offers)"},
			&cli.StringFlag{Name: "model", EnvVars: []string{"SPARKLES_SANDBOX_MODEL"}, Usage: "switch the agent to this model (one of the models it offers)"},
			jsonFlag(),
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 1)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			var sb sandbox.Sandbox
			if ch := (sandbox.ConfigChange{Mode: c.String("mode"), Model: c.String("model")}); ch != (sandbox.ConfigChange{}) {
				sb, err = api.SetConfig(c.Context, args[0], ch)
			} else {
				sb, err = api.GetSandbox(c.Context, args[0])
			}
			if err != nil {
				return api.describe(err)
			}
			if c.Bool("json") {
				cfg := sb.Config
				if cfg == nil {
					cfg = &sandbox.AgentConfig{Modes: []sandbox.ConfigChoice{}, Models: []sandbox.ConfigChoice{}}
				}
				return printJSON(c.App.Writer, cfg)
			}
			return printConfig(c.App.Writer, sb.Config)
		},
	}
}

// printConfig prints the mode and the model, then the choices, the current
// one marked with *; "-" is one neither asked for nor announced.
func printConfig(w io.Writer, cfg *sandbox.AgentConfig) error {
	if cfg == nil {
		cfg = &sandbox.AgentConfig{}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, sanitize(v, false)) }
	row("mode", orDash(cfg.Mode))
	row("model", orDash(cfg.Model))
	row("modes", choicesLine(cfg.Modes, cfg.Mode))
	row("models", choicesLine(cfg.Models, cfg.Model))
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// choicesLine lists the choices as "id (name)", the name left out when it
// is the id; "none announced" when the agent offered none.
func choicesLine(choices []sandbox.ConfigChoice, current string) string {
	if len(choices) == 0 {
		return "none announced"
	}
	items := make([]string, len(choices))
	for i, ch := range choices {
		s := ch.ID
		if ch.Name != "" && ch.Name != ch.ID {
			s += " (" + ch.Name + ")"
		}
		if ch.ID == current {
			s = "*" + s
		}
		items[i] = s
	}
	return strings.Join(items, ", ")
}

// configLine is the gist of a sandbox.updated in at most n runes.
func configLine(d *sandbox.SandboxUpdated, n int) string {
	return oneLine(fmt.Sprintf("mode %s · model %s", orDash(d.Config.Mode), orDash(d.Config.Model)), n)
}
