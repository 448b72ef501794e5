package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
)

func newAgentsCheckCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "boot each agent as a sandbox would, confined, and say what it found at each step; exit 0 only when all are ready",
		ArgsUsage: "[NAME…] (all registered agents when none is named)",
		Flags:     clientFlags(jsonFlag()),
		Action: func(c *cli.Context) error {
			names, err := positional(c, 0, -1)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			if len(names) == 0 {
				list, err := api.Agents(c.Context)
				if err != nil {
					return api.describe(err)
				}
				for _, a := range list {
					names = append(names, a.Name)
				}
			}
			checks := []client.AgentCheck{}
			ready := true
			for _, n := range names {
				ch, err := api.CheckAgent(c.Context, n)
				if err != nil {
					return api.describe(err)
				}
				ready = ready && ch.Ready
				if c.Bool("json") {
					checks = append(checks, ch)
					continue
				}
				printCheck(c.App.Writer, ch)
			}
			if c.Bool("json") {
				if err := printJSON(c.App.Writer, checks); err != nil {
					return err
				}
			}
			if !ready {
				return exitCode(1)
			}
			return nil
		},
	}
}

// printCheck prints one agent's check: a heading, a line per step, and on
// failure the end of its stderr and what would fix it.
func printCheck(w io.Writer, ch client.AgentCheck) {
	state := fmt.Sprintf("ready in %d ms", ch.DurationMS)
	if !ch.Ready {
		state = "NOT READY"
	}
	fmt.Fprintf(w, "%s: %s\n", ch.Name, state)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range ch.Steps {
		mark := "ok"
		if !s.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, s.Step, s.Detail)
	}
	tw.Flush()
	if ch.Stderr != "" {
		fmt.Fprintln(w, "  its stderr ended with:")
		for line := range strings.Lines(ch.Stderr) {
			fmt.Fprintln(w, "    "+strings.TrimRight(line, "\n"))
		}
	}
	if ch.Fix != "" {
		fmt.Fprintln(w, "  fix: "+ch.Fix)
	}
}
