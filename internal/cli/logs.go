package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
)

func newSandboxLogsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print what a sandbox's agent wrote to its stderr; with --follow, keep printing as it writes",
		ArgsUsage: "ID",
		Description: "Prints the agent's log of sandbox ID, the rotated file first, redacted as every answer of the\n" +
			"server is. It is where a boot that failed says why (\"Cannot find module …\", \"not found\").\n" +
			"It needs the server's token. On a terminal, control characters are dropped.",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, EnvVars: []string{"SPARKLES_LOGS_FOLLOW"}, Usage: "keep printing each line the agent writes, until interrupted"},
			&cli.IntFlag{Name: "tail", Value: -1, EnvVars: []string{"SPARKLES_LOGS_TAIL"}, Usage: "print only the last N lines (0: none, with --follow only what comes next; default: all)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 1)
			if err != nil {
				return err
			}
			o := client.LogsOptions{Follow: c.Bool("follow")}
			switch n := c.Int("tail"); {
			case n == 0:
				o.NewOnly = true
			case n > 0:
				o.Tail = n
			case n < -1:
				return usagef("--tail %d: give a number of lines, 0 or more; see `%s --help`", n, c.Command.HelpName)
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(c.Context)
			defer stop()
			body, err := api.Logs(ctx, args[0], o)
			if err != nil {
				return api.describe(err)
			}
			defer body.Close()
			err = copyLog(c.App.Writer, body, colorOut(c.App.Writer))
			switch {
			case err != nil && ctx.Err() != nil:
				return nil // interrupted: the normal end of --follow
			case err != nil:
				return fmt.Errorf("the log of %s was cut short: %w", args[0], err)
			case o.Follow && ctx.Err() == nil:
				return fmt.Errorf("the server at %s ended the log of %s (it stopped or restarted); run the command again", api.url, args[0])
			}
			return nil
		},
	}
}

// copyLog writes the log as it comes, line by line so that a follow shows
// each line at once; on a terminal without the control characters an
// agent's output may hold.
func copyLog(w io.Writer, r io.Reader, tty bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if tty {
			line = sanitize(line, false)
		}
		if _, werr := io.WriteString(w, line); werr != nil {
			return werr
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
