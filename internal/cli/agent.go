package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/urfave/cli/v2"
)

// slowPauseEnv paces the demo agent's slow replies, for `sparkles agent
// demo` and for the demo agent that `sparkles serve` starts.
const slowPauseEnv = "SPARKLES_DEMO_SLOW_PAUSE"

func newAgentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "built-in ACP agents",
		Subcommands: []*cli.Command{{
			Name:  "demo",
			Usage: "a deterministic ACP agent on stdin/stdout, no model (the default agent of serve)",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "slow-pause", Value: agent.DemoPersonSlowPause, EnvVars: []string{slowPauseEnv},
					Usage: "pause between the 100 steps of a reply to a prompt that says slow; the tests take 10ms"},
			},
			Action: func(c *cli.Context) error {
				demo := agent.Demo{SlowPause: c.Duration("slow-pause")}
				err := demo.Run(c.Context, os.Stdin, os.Stdout, os.Environ())
				if errors.Is(err, agent.ErrCrash) {
					// The scripted crash: exit abruptly, as a failing agent would.
					os.Exit(3)
				}
				return err
			},
		}},
	}
}

// demoCommand is how serve starts its demo agent. An agent gets the
// sandbox's environment, not serve's, so serve hands a pace set in its own
// environment on as a flag.
func demoCommand(exe string) ([]string, error) {
	argv := []string{exe, "agent", "demo"}
	v := os.Getenv(slowPauseEnv)
	if v == "" {
		return argv, nil
	}
	if d, err := time.ParseDuration(v); err != nil || d <= 0 {
		return nil, usagef("%s=%q is not a duration; set it like %s=100ms, or unset it", slowPauseEnv, v, slowPauseEnv)
	}
	return append(argv, "--slow-pause", v), nil
}

// demoWordsHelp lists the words of the demo agent for a help text.
func demoWordsHelp() string {
	s := "The demo agent (serve's default) reacts to words in TEXT:"
	for _, w := range agent.DemoWords {
		s += fmt.Sprintf("\n  %-11s %s", w.Word, w.Does)
	}
	return s
}
