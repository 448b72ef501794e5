// Package cli is the sparkles command line: one urfave/cli command per
// file, each built by its new...Command constructor. serve runs the server
// internal/app wires; the other commands are clients of its API, the demo
// agent, the database tools and the benchmarks.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// exitCode lets a command choose its process exit status without printing
// anything more (the command already said what went wrong).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Main runs the command line args (args[0] is the program) and returns
// the process's exit status, having printed what went wrong.
func Main(args []string) int {
	err := newApp().Run(args)
	code, print := exitStatus(err)
	if print {
		fmt.Fprintln(os.Stderr, "sparkles:", err)
	}
	return code
}

func newApp() *cli.App {
	// --version prints what `sparkles version` prints.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, versionLine()) }
	return withUsage(&cli.App{
		Name:    "sparkles",
		Usage:   "run coding agents in sandboxes and stream what they do",
		Version: versionLine(),
		Commands: []*cli.Command{
			newServeCommand(),
			newAgentCommand(),
			newAgentsCommand(),
			newSandboxCommand(),
			newPromptCommand(),
			newEventsCommand(),
			newApproveCommand(),
			newDenyCommand(),
			newCancelCommand(),
			newFilesCommand(),
			newCpCommand(),
			newDiffCommand(),
			newRevertCommand(),
			newWebhooksCommand(),
			newDBCommand(),
			newBenchCommand(),
			newVersionCommand(),
		},
		HideHelpCommand: true,
	})
}

// signalContext returns a context canceled by the first SIGINT or SIGTERM;
// a second signal exits at once.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			signal.Stop(ch)
			return
		}
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "sparkles: second signal, exiting now")
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}
