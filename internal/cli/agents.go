package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
)

func newAgentsCommand() *cli.Command {
	return &cli.Command{
		Name:        "agents",
		Usage:       "list the agents the server runs, and whether each can start there",
		Flags:       clientFlags(jsonFlag()),
		Subcommands: []*cli.Command{newAgentsCheckCommand()},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0); err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			list, err := api.Agents(c.Context)
			if err != nil {
				return api.describe(err)
			}
			if list == nil {
				list = []client.Agent{}
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, list)
			}
			return printAgents(c.App.Writer, list)
		},
	}
}

func printAgents(w io.Writer, list []client.Agent) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAVAILABLE")
	for _, a := range list {
		avail := "yes"
		if !a.Available {
			avail = "no: its command is not found on the server"
		}
		fmt.Fprintf(tw, "%s\t%s\n", a.Name, avail)
	}
	return tw.Flush()
}
