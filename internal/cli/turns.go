package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newApproveCommand() *cli.Command {
	return newDecideCommand("approve", "allow what an agent asked for, this once", client.Approve)
}

func newDenyCommand() *cli.Command {
	return newDecideCommand("deny", "refuse what an agent asked for", client.Deny)
}

func newDecideCommand(name, usage string, d client.Decision) *cli.Command {
	flags := clientFlags()
	if d == client.Approve {
		flags = append(flags, &cli.StringFlag{Name: "option", EnvVars: []string{"SPARKLES_APPROVE_OPTION"},
			Usage: "choose one of the approval's options by its option_id (e.g. an allow_always option) instead of a plain approve"})
	}
	description := "A plain deny answers the agent's reject_once option (its reject_always only when it offers no\n" +
		"reject_once)."
	if d == client.Approve {
		description = "A plain approve grants one use: it answers the agent's allow_once option, whatever order the\n" +
			"agent lists its options in (its allow_always only when it offers no allow_once). To let the agent\n" +
			"stop asking, pass --option with the option_id of its allow_always option, as approval.requested\n" +
			"lists it."
	}
	return &cli.Command{
		Name:        name,
		Usage:       usage,
		Description: description,
		ArgsUsage:   "SANDBOX_ID APPROVAL_ID",
		Flags:       flags,
		Action: func(c *cli.Context) error {
			args, err := positional(c, 2, 2)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			decision := d
			if opt := c.String("option"); opt != "" {
				decision = client.Decision{OptionID: opt}
			}
			a, err := api.Decide(c.Context, args[0], args[1], decision)
			if client.IsType(err, sandbox.EApprovalResolved) {
				return fmt.Errorf("approval %s was already resolved; nothing changed", args[1])
			}
			if err != nil {
				return api.describe(err)
			}
			outcome := "resolved"
			if a.Decision != nil {
				outcome = *a.Decision
			}
			fmt.Fprintf(c.App.Writer, "%s %s\n", outcome, a.ID)
			return nil
		},
	}
}

func newCancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a turn (the sandbox's current turn when no TURN_ID is given)",
		ArgsUsage: "SANDBOX_ID [TURN_ID]",
		Flags:     clientFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 2)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			id := args[0]
			var turnID string
			if len(args) == 2 {
				turnID = args[1]
			} else {
				sb, err := api.GetSandbox(c.Context, id)
				if err != nil {
					return api.describe(err)
				}
				if sb.CurrentTurn == nil {
					return fmt.Errorf("sandbox %s has no turn running; nothing to cancel", id)
				}
				turnID = sb.CurrentTurn.ID
			}
			t, err := api.CancelTurn(c.Context, id, turnID)
			if err != nil {
				return api.describe(err)
			}
			if t.Done() {
				fmt.Fprintf(c.App.Writer, "turn %s had already ended (%s)\n", t.ID, t.Status)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "canceling turn %s\n", t.ID)
			return nil
		},
	}
}
