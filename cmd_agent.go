package main

import (
	"errors"
	"os"

	"github.com/sparkles-dev/sparkles/agent"
	"github.com/urfave/cli/v2"
)

func newAgentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "built-in ACP agents",
		Subcommands: []*cli.Command{{
			Name:  "demo",
			Usage: "a deterministic ACP agent on stdin/stdout, no model (the default agent of serve)",
			Action: func(c *cli.Context) error {
				err := agent.RunDemo(c.Context, os.Stdin, os.Stdout, os.Environ())
				if errors.Is(err, agent.ErrCrash) {
					// The scripted crash: exit abruptly, as a failing agent would.
					os.Exit(3)
				}
				return err
			},
		}},
	}
}
