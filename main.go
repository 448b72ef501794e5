// Command sparkles runs AI coding agents in sandboxes and serves one durable,
// resumable, curated event stream per sandbox. The same binary is the server
// (sparkles serve), the client (sparkles sandbox|prompt|events|…) and a
// scripted demo agent (sparkles agent demo).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/urfave/cli/v2"
)

// exitCode lets a command choose its process exit status without printing
// anything more (the command already said what went wrong).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	if confine.IsEntry(os.Args) {
		// serve re-executes this binary to start each agent confined.
		confine.Main()
	}
	err := newApp().Run(os.Args)
	code, print := exitStatus(err)
	if print {
		fmt.Fprintln(os.Stderr, "sparkles:", err)
	}
	os.Exit(code)
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
