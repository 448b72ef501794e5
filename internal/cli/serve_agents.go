package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

// agentFlags are serve's flags about agents: which exist and how many run.
func agentFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "agents-file", EnvVars: []string{"SPARKLES_AGENTS_FILE"}, Usage: "JSON file of agents: {\"agents\": {NAME: {command, args, env, pass_env}}} (see docs/agents.md)"},
		&cli.StringSliceFlag{Name: "agent", EnvVars: []string{"SPARKLES_AGENT"}, Usage: "register an ACP agent as NAME=COMMAND, split with shell quoting (repeatable; it replaces an agents-file entry of that name); the built-in demo agent is always there as \"demo\""},
		&cli.DurationFlag{Name: "agent-idle-timeout", Value: coordinator.DefaultAgentIdleTimeout, EnvVars: []string{"SPARKLES_AGENT_IDLE_TIMEOUT"}, Usage: "stop an agent that has had no turn this long; the next turn starts it again (0: never)"},
		&cli.IntFlag{Name: "max-agents", Value: coordinator.DefaultMaxAgents, EnvVars: []string{"SPARKLES_MAX_AGENTS"}, Usage: "agents running at once; beyond it the least recently used idle agent stops, or the turn waits"},
	}
}

// serveAgents builds the registry: the demo agent, the agents file, then
// the --agent flags, each replacing an earlier entry of the same name.
func serveAgents(c *cli.Context, exe string, log *slog.Logger) (registry.Registry, error) {
	demo, err := demoCommand(exe)
	if err != nil {
		return nil, err
	}
	agents := registry.Registry{"demo": {Command: demo[0], Args: demo[1:]}}
	if path := c.String("agents-file"); path != "" {
		file, err := registry.Load(path)
		if err != nil {
			return nil, err
		}
		for name, a := range file {
			agents[name] = a
		}
	}
	for _, f := range c.StringSlice("agent") {
		name, a, err := registry.ParseFlag(f)
		if err != nil {
			return nil, err
		}
		agents[name] = a
	}
	for _, name := range agents.Names() {
		a := agents[name]
		if !a.Available() {
			log.Warn("the agent's command is not found; its sandboxes fail to start until it is installed", "agent", name, "command", a.Command)
		}
	}
	return agents, nil
}

// agentLimits reads --agent-idle-timeout and --max-agents as the
// coordinator takes them.
func agentLimits(c *cli.Context) (idle time.Duration, maxAgents int, err error) {
	idle = c.Duration("agent-idle-timeout")
	switch {
	case idle < 0:
		return 0, 0, fmt.Errorf("--agent-idle-timeout %s: want a duration such as 15m, or 0 to never stop idle agents", idle)
	case idle == 0:
		idle = -1 // the coordinator's "never"
	}
	maxAgents = c.Int("max-agents")
	if maxAgents < 1 {
		return 0, 0, fmt.Errorf("--max-agents %d: want at least 1", maxAgents)
	}
	return idle, maxAgents, nil
}
