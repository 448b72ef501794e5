package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// EnvChildAgent makes the child server of the agents scenario run the
// demo agent: the JSON argv of its command, or "builtin" for the demo in
// the child's own process. "flood" runs the peer scenario's flooding agent
// instead (RunFloodAgent), as the child's own command with EnvFloodAgent
// set.
const EnvChildAgent = "SPARKLES_BENCH_AGENT"

// benchIdleTimeout is the idle timeout of the agents scenario: short, so
// that a thousand agents are stopped soon after their turn.
const benchIdleTimeout = 200 * time.Millisecond

// runAgents measures what a sandbox costs the server once its agent has
// stopped for being idle, and how long a turn on such a sandbox takes to
// its first durable event: the agent's boot and its session/load. The
// server is a child process, so the figures hold it alone.
func runAgents(ctx context.Context, r *runner) error {
	n, wakes := pick(r, 1000, 20), pick(r, 100, 5)
	spec := "builtin"
	how := "the demo agent in the server's process"
	if len(r.cfg.AgentCommand) > 0 {
		b, _ := json.Marshal(r.cfg.AgentCommand)
		spec, how = string(b), "the demo agent as a process (sparkles agent demo)"
	}
	c, closeServer, err := r.child(ctx, EnvChildAgent+"="+spec)
	if err != nil {
		return err
	}
	defer closeServer()
	before, beforeGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	r.logf("creating %d sandboxes and running one turn in each", n)
	created, err := c.do(ctx, childRequest{Op: "create", N: n})
	if err != nil {
		return err
	}
	if _, err := c.do(ctx, childRequest{Op: "turns", IDs: created.IDs}); err != nil {
		return err
	}
	if _, err := c.do(ctx, childRequest{Op: "settle"}); err != nil {
		return err
	}
	after, afterGo, err := settledMem(ctx, c)
	if err != nil {
		return err
	}
	if err := r.serverProfile(ctx, c); err != nil {
		return err
	}
	cond := fmt.Sprintf("%d sandboxes, one finished demo turn each, every agent stopped by the %s idle timeout; server in a child process, "+
		"after a GC that returns freed memory to the OS", n, benchIdleTimeout)
	perUnitMem(r, "idle sandbox", n, cond, 64, before, after, beforeGo, afterGo)

	r.logf("waking %d stopped sandboxes, one at a time", wakes)
	woken, err := c.do(ctx, childRequest{Op: "wake", IDs: created.IDs[:wakes]})
	if err != nil {
		return err
	}
	ms := slices.Clone(woken.Millis)
	slices.Sort(ms)
	q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	wcond := fmt.Sprintf("%d stopped sandboxes woken one after the other with %s: from StartTurn to the turn's turn.started durable, "+
		"which is the boot, initialize, session/load of the earlier turn and one commit", wakes, how)
	r.add(Figure{Name: "turn on a stopped sandbox to its first event, p50", Value: q(0.5), Unit: "ms", Conditions: wcond,
		Target: "<= 250 ms", Met: atLeast(250, q(0.5))})
	r.add(Figure{Name: "turn on a stopped sandbox to its first event, p99", Value: q(0.99), Unit: "ms", Conditions: wcond})
	return nil
}

// benchAgents is the demo agent of a child server, and the count of the
// agents running there.
type benchAgents struct {
	command []string // nil: in-process
	flood   bool     // command is the flooding agent

	mu      sync.Mutex
	running int
	changed chan struct{}
}

// childAgents reads EnvChildAgent: nil when the child runs no agents.
func childAgents() (*benchAgents, error) {
	spec := os.Getenv(EnvChildAgent)
	if spec == "" {
		return nil, nil
	}
	a := &benchAgents{changed: make(chan struct{})}
	if spec == "flood" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench child: the flooding agent is this program: %w", err)
		}
		a.command, a.flood = append([]string{exe}, os.Args[1:]...), true
		return a, nil
	}
	if spec != "builtin" {
		if err := json.Unmarshal([]byte(spec), &a.command); err != nil || len(a.command) == 0 {
			return nil, fmt.Errorf("bench child: %s=%q is neither builtin nor a JSON argv", EnvChildAgent, spec)
		}
	}
	return a, nil
}

func (a *benchAgents) configure(m *app.Main) {
	m.DefaultAgent = "demo"
	if a.flood {
		// An agent per producer, each busy in its turn for the whole run.
		m.Agents = registry.Registry{"demo": {Command: a.command[0], Args: a.command[1:], Env: map[string]string{EnvFloodAgent: "1"}}}
		m.MaxAgents = 4096
		return
	}
	if a.command != nil {
		m.Agents = registry.Registry{"demo": {Command: a.command[0], Args: a.command[1:]}}
	} else {
		m.Builtins = map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo}
	}
	m.AgentIdleTimeout = benchIdleTimeout
}

// waitNone waits until no agent runs.
func (a *benchAgents) waitNone(ctx context.Context) error {
	for {
		a.mu.Lock()
		n, ch := a.running, a.changed
		a.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d agents still run: %w", n, ctx.Err())
		}
	}
}

func (a *benchAgents) AgentsRunning(delta int) {
	a.mu.Lock()
	a.running += delta
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// runTurns runs one turn in each sandbox, a few at a time, each to its end.
func runTurns(ctx context.Context, l *local, ids []string) error {
	return parallel(ctx, len(ids), 16, func(ctx context.Context, i int) error {
		_, err := turnUntil(ctx, l, ids[i], sandbox.TypeTurnCompleted)
		return err
	})
}

// wakeTurns starts a turn in each sandbox in turn and reports how long
// each took to its turn.started, then lets it finish.
func wakeTurns(ctx context.Context, l *local, ids []string) ([]float64, error) {
	var out []float64
	for _, id := range ids {
		sb, err := l.store.Sandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		if sb.Status != sandbox.StatusStopped {
			return nil, fmt.Errorf("sandbox %s is %s (%s), not stopped", id, sb.Status, sb.StatusDetail)
		}
		start := time.Now()
		turnID, err := turnUntil(ctx, l, id, sandbox.TypeTurnStarted)
		if err != nil {
			return nil, err
		}
		out = append(out, ms(time.Since(start)))
		// The figure is of a boot that loads the session: one that opened
		// a new session instead measured something else.
		if sb, err := l.store.Sandbox(ctx, id); err != nil || !strings.Contains(sb.StatusDetail, "earlier session") || strings.Contains(sb.StatusDetail, "new session") {
			return nil, fmt.Errorf("sandbox %s did not load its session: %s (%v)", id, sb.StatusDetail, err)
		}
		if err := waitEvent(ctx, l.store, id, turnID, sandbox.TypeTurnCompleted); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// turnUntil starts a turn and waits until the turn has an event of typ.
func turnUntil(ctx context.Context, l *local, id string, typ sandbox.Type) (string, error) {
	head, err := l.store.Head(id)
	if err != nil {
		return "", err
	}
	turn, err := l.coord.StartTurn(ctx, id, "hello")
	if err != nil {
		return "", err
	}
	return turn.ID, waitEventAfter(ctx, l.store, id, head.LastEventID, turn.ID, typ)
}

func waitEvent(ctx context.Context, st sandbox.Store, id, turnID string, typ sandbox.Type) error {
	return waitEventAfter(ctx, st, id, 0, turnID, typ)
}

// waitEventAfter waits until the log of id, after the given id, holds an
// event of typ in the turn.
func waitEventAfter(ctx context.Context, st sandbox.Store, id string, after uint64, turnID string, typ sandbox.Type) error {
	for {
		wait := st.Wait(id)
		recs, err := st.Read(ctx, id, after, 1000)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			after = rec.ID
			ev, err := rec.Decode()
			if err != nil {
				return err
			}
			if ev.Type == typ && ev.TurnID == turnID {
				return nil
			}
			if ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turnID && typ != sandbox.TypeTurnCompleted {
				return fmt.Errorf("turn %s completed without a %s", turnID, typ)
			}
		}
		if len(recs) > 0 {
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
