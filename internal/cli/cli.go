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
	err := newAppFor(args).Run(args)
	code, print := exitStatus(err)
	if print {
		fmt.Fprintln(os.Stderr, "sparkles:", err)
	}
	return code
}

// commands are the top-level commands, in the order the help lists them,
// each by the name it is called with and its constructor.
var commands = []struct {
	name string
	new  func() *cli.Command
}{
	{"serve", newServeCommand},
	{"agent", newAgentCommand},
	{"agents", newAgentsCommand},
	{"sandbox", newSandboxCommand},
	{"prompt", newPromptCommand},
	{"events", newEventsCommand},
	{"approve", newApproveCommand},
	{"deny", newDenyCommand},
	{"cancel", newCancelCommand},
	{"files", newFilesCommand},
	{"cp", newCpCommand},
	{"diff", newDiffCommand},
	{"revert", newRevertCommand},
	{"webhooks", newWebhooksCommand},
	{"db", newDBCommand},
	{"bench", newBenchCommand},
	{"version", newVersionCommand},
}

// newApp builds the whole command tree.
func newApp() *cli.App {
	cmds := make([]*cli.Command, len(commands))
	for i, c := range commands {
		cmds[i] = c.new()
	}
	return appOf(cmds)
}

// newAppFor builds the app that runs args: when args name a top-level
// command, an app of that command alone, which parses and helps exactly
// as the whole tree does for it, so that `sparkles serve` does not build
// the flags of sixteen other commands on its way to its first answer;
// the whole tree otherwise (no command, a flag first, a name it does not
// know), whose help and suggestions need every command.
func newAppFor(args []string) *cli.App {
	if len(args) > 1 {
		for _, c := range commands {
			if c.name == args[1] {
				return appOf([]*cli.Command{c.new()})
			}
		}
	}
	return newApp()
}

func appOf(cmds []*cli.Command) *cli.App {
	app := plainAppOf(cmds)
	keepNames(app.Commands)
	return app
}

// plainAppOf is appOf without keepNames: the app as urfave/cli alone
// would run it, which TestKeepNames compares appOf's with.
func plainAppOf(cmds []*cli.Command) *cli.App {
	// --version prints what `sparkles version` prints.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, versionLine()) }
	return withUsage(&cli.App{
		Name:            "sparkles",
		Usage:           "run coding agents in sandboxes and stream what they do",
		Version:         versionLine(),
		Commands:        cmds,
		HideHelpCommand: true,
	})
}

// signalContext returns a context canceled by the first SIGINT or SIGTERM;
// a second signal exits at once.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel, installed := signalContextAsync(parent)
	<-installed
	return ctx, cancel
}

// signalContextAsync is signalContext with its handlers installed by its
// own goroutine, beside the caller's work, and installed closed once they
// are. The first installation starts the runtime's signal thread and waits
// for it (about 1 ms on a small VM), which serve overlaps with its start.
func signalContextAsync(parent context.Context) (context.Context, context.CancelFunc, <-chan struct{}) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	installed := make(chan struct{})
	go func() {
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		close(installed)
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
	return ctx, func() { <-installed; signal.Stop(ch); cancel() }, installed
}
