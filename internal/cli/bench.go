package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/internal/bench"
)

func newBenchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure this machine: appends, stream latency, fan-out and its floor, idle connections, replay, slow readers, idle agents, cold start, the file's size",
		Description: "Starts its own servers on temporary stores, in this process or, where the server's memory is\n" +
			"measured, in a child process, drives them with a loopback client in this process, runs the\n" +
			"scenarios one after the other and prints each figure with its conditions and target. Scenarios:\n" +
			"append, latency, fanout, floor, idle, replay, stall, stall-snapshot, agents, coldstart, size, turncost, workspace, webhooks; and, only when named, peer:\n" +
			"Sparkles and Mercure side by side, which needs --peer-mercure. The full run takes a few minutes; --short checks\n" +
			"that every scenario works in seconds.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "scenario", EnvVars: []string{"SPARKLES_BENCH_SCENARIO"}, Usage: "scenarios to run, comma-separated (default: all)"},
			&cli.BoolFlag{Name: "short", EnvVars: []string{"SPARKLES_BENCH_SHORT"}, Usage: "tiny sizes: check that each scenario runs"},
			&cli.BoolFlag{Name: "json", EnvVars: []string{"SPARKLES_JSON"}, Usage: "print the report as JSON"},
			&cli.StringFlag{Name: "dir", EnvVars: []string{"SPARKLES_BENCH_DIR"}, Usage: "directory of the store files, on the disk to measure (default: the system's temp dir)"},
			&cli.StringFlag{Name: "profile", EnvVars: []string{"SPARKLES_BENCH_PROFILE"}, Usage: "write pprof profiles of each scenario into this directory"},
			&cli.StringFlag{Name: "peer-mercure", EnvVars: []string{"SPARKLES_BENCH_PEER_MERCURE"}, Usage: "the mercure-peer binary that the peer scenario measures against (internal/bench/mercure/run builds it and runs the scenario)"},
			&cli.StringFlag{Name: "mercure-hub", EnvVars: []string{"SPARKLES_BENCH_MERCURE_HUB"}, Usage: "the Mercure hub as shipped (Caddy with the Mercure module: internal/bench/mercurehub builds it), whose cold start the peer scenario also measures against"},
			// The idle, stall and fanout scenarios run a server in a child
			// process: this binary again, told so by the environment.
			&cli.StringFlag{Name: "child", EnvVars: []string{bench.EnvChild}, Hidden: true},
			// The peer scenario's child server runs its agents as this
			// binary again, told so by the environment.
			&cli.BoolFlag{Name: "flood-agent", EnvVars: []string{bench.EnvFloodAgent}, Hidden: true},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("flood-agent") {
				ctx, stop := signalContext(c.Context)
				defer stop()
				return bench.RunFloodAgent(ctx, os.Stdin, os.Stdout)
			}
			if dir := c.String("child"); dir != "" {
				ctx, stop := signalContext(c.Context)
				defer stop()
				return bench.RunChild(ctx, dir, os.Stdin, os.Stdout)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("cannot find the sparkles binary to run the child server: %w", err)
			}
			ctx, stop := signalContext(c.Context)
			defer stop()
			rep, err := bench.Run(ctx, bench.Config{
				Scenarios:    c.StringSlice("scenario"),
				Short:        c.Bool("short"),
				Dir:          c.String("dir"),
				ChildCommand: []string{exe, "bench"},
				ServeCommand: []string{exe, "serve"},
				AgentCommand: []string{exe, "agent", "demo"},
				Log:          os.Stderr,
				ProfileDir:   c.String("profile"),
				PeerMercure:  c.String("peer-mercure"),
				MercureHub:   c.String("mercure-hub"),
			})
			if rep != nil {
				write := rep.WriteTable
				if c.Bool("json") {
					write = rep.WriteJSON
				}
				if werr := write(os.Stdout); werr != nil && err == nil {
					err = werr
				}
			}
			if err != nil && context.Cause(ctx) != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			return err
		},
	}
}
