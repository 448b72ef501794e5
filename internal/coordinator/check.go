package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/disk"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// Steps of a check, in order.
const (
	StepCommand     = "command"
	StepStart       = "start"
	StepGrants      = "grants"
	StepConfinement = "confinement"
	StepInitialize  = "initialize"
	StepAuth        = "auth"
	StepSessionNew  = "session/new"
	StepReady       = "ready"
)

// granter is the launcher's view of what a command line is given to read
// (internal/confine); a launcher without it is reported as confining
// without a list.
type granter interface {
	Grants(argv []string) ([]string, error)
}

type isolator interface{ Isolation() string }

const (
	fixReadPath = "if its files are outside the system directories (a script its interpreter runs, modules a wrapper loads), grant them with --agent-read-path or the registry's read_paths"
	fixCommand  = "install the agent on the server, or give its absolute path as the registry's command"
	fixAuth     = "give it its key: the registry's env or pass_env for every sandbox, or a sandbox's secrets"
)

// CheckAgent boots the agent registered as name as a sandbox of it would
// be booted (the same command, environment and confinement) in a
// throwaway sandbox directory, opens a session and stops it again. A
// failure of the agent is a check that is not ready, not an error; the
// error is for a name that is not registered or a server that cannot run
// the check.
func (c *Coordinator) CheckAgent(ctx context.Context, name string) (sandbox.AgentCheck, error) {
	reg, registered := c.cfg.Agents[name]
	builtin := c.cfg.Builtins[name]
	if !registered && builtin == nil {
		return sandbox.AgentCheck{}, sandbox.Errorf(sandbox.ENotFound, "agent %q is not registered on this server", name)
	}
	if c.ctx.Err() != nil {
		return sandbox.AgentCheck{}, sandbox.Errorf(sandbox.EConflict, "the server is shutting down")
	}
	ch := sandbox.AgentCheck{Name: name, Steps: []sandbox.CheckStep{}}
	red := translate.NewRedactor(c.redactions("", nil))
	step := func(s string, ok bool, detail string) {
		ch.Steps = append(ch.Steps, sandbox.CheckStep{Step: s, OK: ok, Detail: red(detail)})
	}

	var command []string
	if builtin != nil {
		step(StepCommand, true, "built in: runs inside the server")
		step(StepConfinement, true, "none: a built-in agent is no process")
	} else {
		command = reg.Argv()
		if !c.checkCommand(&ch, step, command) {
			return ch, nil
		}
	}

	dir := datadir.Dir(c.cfg.DataDir).Check("agent-" + rand.Text()[:12])
	work := dir.Work()
	defer disk.RemoveAll(string(dir))
	if err := os.MkdirAll(work, 0o700); err != nil {
		c.log.Error("agents check: make its sandbox directory", "err", err)
		return sandbox.AgentCheck{}, errors.New("the check's sandbox directory could not be created")
	}
	logf, err := openAgentLog(dir.AgentLog(), agentLogTail*4)
	if err != nil {
		c.log.Error("agents check: open its agent log", "err", err)
		return sandbox.AgentCheck{}, errors.New("the check's agent log could not be created")
	}
	defer logf.Close()
	env := agentEnv(reg, config{})
	creds := credentialsDetail(env)
	acfg := agent.Config{
		Command: command,
		Run:     builtin,
		Dir:     work,
		Env:     env,
		Stderr:  logf,
		Confinement: agent.Confinement{
			Network: reg.Network, ReadPaths: reg.ReadPaths, WritePaths: reg.WritePaths, HostPorts: reg.HostPorts,
		},
		Logger:   c.log.With("agent_check", name),
		Launcher: c.cfg.Launcher,
		Sandbox:  string(dir),
		FSBudget: c.fsBudget,
	}
	bootCtx, cancel := context.WithTimeout(ctx, c.cfg.BootTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	start := time.Now()
	conn, err := agent.Start(bootCtx, acfg)
	ch.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		if bootCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			err = fmt.Errorf("the agent did not start a session within %s", c.cfg.BootTimeout)
		}
		c.checkFailed(&ch, step, err, builtin == nil, creds)
		ch.Stderr = red(strings.TrimSpace(logf.Tail()))
		return ch, nil
	}
	defer func() {
		conn.Close()
		<-conn.Done()
	}()
	caps := capsDetail(conn.Capabilities())
	step(StepInitialize, true, fmt.Sprintf("protocol version %d; %s", agent.ProtocolVersion, caps))
	step(StepAuth, true, authDetail(conn.AuthMethods())+"; "+creds+"; the session opened, so it has what it needs")
	step(StepSessionNew, true, "a session opened")
	step(StepReady, true, fmt.Sprintf("ready in %d ms", ch.DurationMS))
	ch.Ready = true
	return ch, nil
}

// checkCommand reports the command, what it is given to read and the
// confinement; false when the agent cannot start at all.
func (c *Coordinator) checkCommand(ch *sandbox.AgentCheck, step func(string, bool, string), argv []string) bool {
	path := argv[0]
	if !strings.ContainsRune(path, filepath.Separator) {
		p, err := exec.LookPath(path)
		if err != nil {
			step(StepCommand, false, fmt.Sprintf("%s: not found on the server's PATH", path))
			ch.Fix = fixCommand
			return false
		}
		path = p
	} else if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		step(StepCommand, false, fmt.Sprintf("%s: not an executable file", path))
		ch.Fix = fixCommand
		return false
	}
	resolved := strings.Join(append([]string{path}, argv[1:]...), " ")
	step(StepCommand, true, resolved)
	if c.cfg.Launcher == nil {
		step(StepGrants, true, "none needed: agents run unconfined, with the server user's rights")
		step(StepConfinement, true, "off")
		return true
	}
	if g, ok := c.cfg.Launcher.(granter); ok {
		read, err := g.Grants(argv)
		if err != nil {
			step(StepGrants, false, err.Error())
			return false
		}
		step(StepGrants, true, grantsDetail(read, c.cfg.Agents[ch.Name].ReadPaths, c.cfg.Agents[ch.Name].WritePaths))
	}
	isolation := "on"
	if i, ok := c.cfg.Launcher.(isolator); ok {
		isolation = i.Isolation()
	}
	step(StepConfinement, true, isolation)
	return true
}

func grantsDetail(read, regRead, regWrite []string) string {
	var parts []string
	if len(read) == 0 {
		parts = append(parts, "read-only: the system directories alone")
	} else {
		parts = append(parts, "read-only: "+strings.Join(read, ", ")+" (and the system directories)")
	}
	if len(regRead) > 0 {
		parts = append(parts, "its read_paths: "+strings.Join(regRead, ", "))
	}
	if len(regWrite) > 0 {
		parts = append(parts, "its write_paths: "+strings.Join(regWrite, ", "))
	}
	return strings.Join(parts, "; ")
}

// checkFailed reports at which step a boot failed, and what would mend it.
func (c *Coordinator) checkFailed(ch *sandbox.AgentCheck, step func(string, bool, string), err error, process bool, creds string) {
	var stopped *agent.StoppedError
	var exit *agent.ExitError
	var auth *agent.AuthError
	switch {
	case errors.As(err, &auth):
		step(StepInitialize, true, fmt.Sprintf("protocol version %d", agent.ProtocolVersion))
		step(StepAuth, false, authDetail(auth.Methods)+"; "+creds)
		step(StepSessionNew, false, auth.Error())
		ch.Fix = fixAuth
	case errors.As(err, &stopped):
		if stopped.Step != StepInitialize {
			step(StepInitialize, true, fmt.Sprintf("protocol version %d", agent.ProtocolVersion))
		}
		what := "the agent stopped"
		switch {
		case errors.As(stopped.Err, &exit) && exit.Code >= 0:
			what = fmt.Sprintf("the agent exited with status %d", exit.Code)
		case errors.As(stopped.Err, &exit):
			what = "the agent was ended (" + strings.TrimPrefix(exit.Error(), "agent exited: ") + ")"
		}
		step(stopped.Step, false, what+" before answering "+stopped.Step)
		if process && c.cfg.Launcher != nil && exit != nil && exit.Code >= 0 {
			ch.Fix = fixReadPath
		}
	default:
		// The agent's own sentence (a refusal, a version it speaks, a
		// launch the launcher refused) says which step it was.
		step(StepStart, false, err.Error())
	}
	step(StepReady, false, fmt.Sprintf("not ready after %d ms", ch.DurationMS))
}

func authDetail(methods []agent.AuthMethod) string {
	if len(methods) == 0 {
		return "no auth methods offered"
	}
	ids := make([]string, len(methods))
	for i, m := range methods {
		ids[i] = m.ID
	}
	return "offers " + strings.Join(ids, ", ")
}

// credentialSuffixes are how the variables that hold an agent's
// credentials are named (ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN,
// GEMINI_API_KEY, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, …).
var credentialSuffixes = []string{"_API_KEY", "_KEY", "_TOKEN", "_SECRET", "_CREDENTIALS", "_SECRET_ACCESS_KEY"}

// credentialsDetail says whether credentials look present in env, the
// environment a sandbox's agent gets from the registry (its env and
// pass_env) before any sandbox's secrets: the names only, never a value.
// A login an agent keeps in files of its own is not seen here; the
// session/new step tells.
func credentialsDetail(env []string) string {
	var names []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if v == "" {
			continue
		}
		for _, suf := range credentialSuffixes {
			if strings.HasSuffix(strings.ToUpper(k), suf) {
				names = append(names, k)
				break
			}
		}
	}
	if len(names) == 0 {
		return "no credential in the environment the registry gives it (no *_API_KEY, *_TOKEN or *_KEY variable); a sandbox's secrets, or the registry's env or pass_env, give it one"
	}
	return "credentials in the environment the registry gives it: " + strings.Join(names, ", ")
}

// capsDetail says what an agent advertised at initialize.
func capsDetail(c agent.Capabilities) string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("loadSession %s; prompts with images %s, audio %s, embedded context %s; MCP over http %s, sse %s (stdio always)",
		yes(c.LoadSession), yes(c.Image), yes(c.Audio), yes(c.EmbeddedContext), yes(c.MCPHTTP), yes(c.MCPSSE))
}

// removeCheckLeftovers removes the scratch sandboxes that agents checks of
// an earlier run left in the data dir (a server stopped or killed while a
// check ran): no check runs before the sandboxes are recovered. What
// resists is logged and tried again at the next start.
func (c *Coordinator) removeCheckLeftovers() {
	dir := datadir.Dir(c.cfg.DataDir).Checks()
	if err := disk.RemoveAll(dir); err != nil {
		c.log.Warn("cannot remove the scratch sandboxes of earlier agents checks", "dir", dir, "err", err)
	}
}
