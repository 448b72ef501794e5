package coordinator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// newRecEnv runs sandboxes of a recAgent named "rec".
func newRecEnv(t *testing.T, a *recAgent, tweak func(*coordinator.Config)) *env {
	t.Helper()
	return newEnv(t, func(c *coordinator.Config) {
		c.Builtins = map[string]coordinator.BuiltinAgent{"rec": a.run}
		c.DefaultAgent = "rec"
		if tweak != nil {
			tweak(c)
		}
	})
}

// logText is the whole log of a sandbox as stored.
func (e *env) logText(id string) string {
	e.t.Helper()
	recs, err := e.store.Read(context.Background(), id, 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range recs {
		b.Write(r.JSON)
		b.WriteByte('\n')
	}
	return b.String()
}

// waitDetail waits until the sandbox's status detail contains s.
func (e *env) waitDetail(id, s string) sandbox.Sandbox {
	e.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ch := e.store.Wait(id)
		sb, err := e.store.Sandbox(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if strings.Contains(sb.StatusDetail, s) {
			return sb
		}
		select {
		case <-ch:
		case <-deadline:
			e.t.Fatalf("sandbox %s is %s (%s), want a detail with %q", id, sb.Status, sb.StatusDetail, s)
		}
	}
}

// TestIdleStop lets an agent sit idle past the timeout: it stops, the
// sandbox says the next turn starts it again, and the next turn boots it
// and loads the session the first boot opened, in the sandbox's directory
// with the same (empty) MCP servers. What the agent replays while loading
// is counted as dropped and appears in no event.
func TestIdleStop(t *testing.T) {
	a := newRecAgent()
	drops := &dropCounter{}
	e := newRecEnv(t, a, func(c *coordinator.Config) {
		c.AgentIdleTimeout = 100 * time.Millisecond
		c.Observer = drops
	})
	sb := e.create(sandbox.CreateParams{})
	if got := completed(e.turnOf(sb, "first question")); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("first turn = %+v", got)
	}
	stopped := e.waitStatus(sb.ID, sandbox.StatusStopped)
	if !strings.Contains(stopped.StatusDetail, "idle") || !strings.Contains(stopped.StatusDetail, "starts again with the next turn") {
		t.Fatalf("status detail %q: want it to say the agent was idle and starts with the next turn", stopped.StatusDetail)
	}
	runs := len(a.boots())
	second := e.turnOf(sb, "second question")
	if got := completed(second); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("second turn = %+v", got)
	}
	boots := a.boots()
	if len(boots) <= runs {
		t.Fatalf("%d runs of the agent after the idle stop, want a new one", len(boots))
	}
	// The agent may have idled out more than once; every boot after the
	// first loads the one session the first opened.
	work := datadir.Dir(e.dir).Sandbox(sb.ID).Work()
	first := boots[0]
	if len(first) < 2 || first[1].Method != "session/new" {
		t.Fatalf("first boot: %+v, want initialize and session/new", first)
	}
	for i, run := range boots[1:] {
		if len(run) < 2 || run[1].Method != "session/load" {
			t.Fatalf("boot %d: %+v, want initialize and session/load", i+2, run)
		}
		p := run[1].Params
		if p.SessionID != "rec-session-1" || p.Cwd != work || p.MCPServers == nil || len(p.MCPServers) != 0 {
			t.Fatalf("boot %d: session/load %+v, want session rec-session-1 in %s with no MCP servers", i+2, p, work)
		}
		for _, c := range run[2:] {
			if c.Method == "session/new" {
				t.Fatalf("boot %d opened a new session after loading: %+v", i+2, run)
			}
		}
	}
	if log := e.logText(sb.ID); strings.Contains(log, replayText) || strings.Contains(log, sandbox.ErrSessionLost) {
		t.Fatalf("the replayed history or a session_lost reached the log:\n%s", log)
	}
	if got, want := drops.count("session_replay"), 3*(len(boots)-1); got != want {
		t.Fatalf("%d replayed updates counted as dropped, want %d", got, want)
	}
}

// TestIdleStopDemo is TestIdleStop with the demo agent as a process: the
// turn after the idle stop remembers the one before it.
func TestIdleStopDemo(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.AgentIdleTimeout = 100 * time.Millisecond })
	sb := e.create(sandbox.CreateParams{})
	e.turnOf(sb, "first question")
	e.waitStatus(sb.ID, sandbox.StatusStopped)
	text := ""
	for _, ev := range e.turnOf(sb, "recall") {
		if d, ok := ev.Data.(*sandbox.MessageCompleted); ok {
			text = d.Text
		}
	}
	if !strings.Contains(text, `Before that you asked: "first question".`) {
		t.Fatalf("the agent forgot the turn before the idle stop: %q", text)
	}
}

// TestAgentExitResumes boots the agent again after it exits on its own:
// the next turn loads the session it had.
func TestAgentExitResumes(t *testing.T) {
	a := newRecAgent()
	e := newRecEnv(t, a, nil)
	sb := e.create(sandbox.CreateParams{})
	if got := completed(e.turnOf(sb, "please exit")); got.Status != sandbox.TurnFailed || got.Error.Code != sandbox.ErrAgentExited {
		t.Fatalf("turn = %+v, want failed with agent_exited", got)
	}
	if got := completed(e.turnOf(sb, "hello again")); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn after the exit = %+v", got)
	}
	boots := a.boots()
	if len(boots) != 2 || boots[1][1].Method != "session/load" || boots[1][1].Params.SessionID != "rec-session-1" {
		t.Fatalf("boots %+v, want the second to load rec-session-1", boots)
	}
}

// TestSessionLost restarts the coordinator and has the agent refuse to
// load its session, as Gemini CLI 0.61 does for a session made in the
// same clock minute: a new session opens, the sandbox says so with
// sandbox.error session_lost and its status detail, the turn still runs,
// and the new session is the one kept for the next boot.
func TestSessionLost(t *testing.T) {
	a := newRecAgent()
	e := newRecEnv(t, a, nil)
	sb := e.create(sandbox.CreateParams{})
	e.turnOf(sb, "first question")

	e.co.Close() // the agent stops with it
	a.failLoad = true
	co, err := coordinator.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.co = co
	if err := co.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	head, err := e.store.Head(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	turn, err := co.StartTurn(context.Background(), sb.ID, "second question")
	if err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, head.LastEventID, turnCompleted(turn.ID))
	if got := completed(evs); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn after the lost session = %+v; events %s", got, types(evs))
	}
	if got, want := squash(evs), "sandbox.error turn.started message.updated message.completed turn.completed"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if d := evs[0].Data.(*sandbox.SandboxError); d.Code != sandbox.ErrSessionLost || !strings.Contains(d.Message, "new one was opened") || evs[0].TurnID != "" {
		t.Fatalf("sandbox.error %+v (turn %q), want session_lost outside the turn", d, evs[0].TurnID)
	}
	got, err := e.store.Sandbox(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.StatusDetail, "new session") {
		t.Fatalf("status detail %q, want it to say a new session opened", got.StatusDetail)
	}
	boots := a.boots()
	if last := boots[len(boots)-1]; len(last) < 3 || last[1].Method != "session/load" || last[2].Method != "session/new" {
		t.Fatalf("last boot %+v, want session/load refused, then session/new", last)
	}
	st, err := e.store.State(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.AgentSession, "rec-session-2"; got != want {
		t.Fatalf("kept session %q, want the new %q", got, want)
	}
}

// TestMaxAgents runs a burst of turns over more sandboxes than there are
// agent slots. Every turn completes, the turns that found no slot say so
// while they wait, and never do more agents run than the limit.
func TestMaxAgents(t *testing.T) {
	const limit, sandboxes = 2, 6
	a := newRecAgent()
	e := newRecEnv(t, a, func(c *coordinator.Config) {
		c.MaxAgents = limit
		c.AgentIdleTimeout = -1 // only a waiting turn frees a slot
	})
	var ids []string
	for range sandboxes {
		ids = append(ids, e.create(sandbox.CreateParams{}).ID)
	}
	// A create only warms an agent up where a slot is free.
	for _, id := range ids[limit:] {
		e.waitDetail(id, "starts with the first turn")
	}
	turns := make([]sandbox.Turn, sandboxes)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			turn, err := e.co.StartTurn(context.Background(), id, fmt.Sprintf("hold %d", i))
			if err != nil {
				t.Error(err)
			}
			turns[i] = turn
		})
	}
	wg.Wait()
	waiting := 0
	for _, id := range ids {
		sb, err := e.store.Sandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sb.StatusDetail, "waits for a free agent slot") {
			waiting++
		}
	}
	if got, want := waiting, sandboxes-limit; got != want {
		t.Fatalf("%d sandboxes say their turn waits for a slot, want %d", got, want)
	}
	close(a.hold)
	for i, id := range ids {
		evs := e.waitFor(id, 0, turnCompleted(turns[i].ID))
		if got := completed(evs); got.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn of sandbox %d = %+v", i, got)
		}
	}
	if got := a.peak(); got > limit {
		t.Fatalf("%d agents ran at once, the limit is %d", got, limit)
	}
	if got := len(a.boots()); got < sandboxes {
		t.Fatalf("%d boots for %d sandboxes", got, sandboxes)
	}
}

// TestEvictLeastRecentlyUsed fills the slots with idle agents and starts a
// turn on a sandbox without one: the agent idle the longest stops for it.
func TestEvictLeastRecentlyUsed(t *testing.T) {
	a := newRecAgent()
	e := newRecEnv(t, a, func(c *coordinator.Config) {
		c.MaxAgents = 2
		c.AgentIdleTimeout = -1
	})
	older := e.create(sandbox.CreateParams{})
	newer := e.create(sandbox.CreateParams{})
	e.waitStatus(older.ID, sandbox.StatusReady)
	e.waitStatus(newer.ID, sandbox.StatusReady)
	e.turnOf(older, "hello") // now the newer sandbox's agent has been idle longer
	third := e.create(sandbox.CreateParams{})
	if got := completed(e.turnOf(third, "hello")); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn = %+v", got)
	}
	if sb := e.waitStatus(newer.ID, sandbox.StatusStopped); !strings.Contains(sb.StatusDetail, "free its slot") {
		t.Fatalf("status detail %q, want it to say the slot went to another sandbox", sb.StatusDetail)
	}
	if sb, _ := e.store.Sandbox(context.Background(), older.ID); sb.Status != sandbox.StatusReady {
		t.Fatalf("the more recently used agent is %s (%s), want ready", sb.Status, sb.StatusDetail)
	}
}

// TestAgentEnv runs the demo agent from a registry entry and reads its
// environment back: registry env < pass_env < sandbox env < secrets, and
// the registry's env wins over the server's base (HOME). (The names say
// nothing of credentials: a PASS_… value would be redacted as one.)
func TestAgentEnv(t *testing.T) {
	t.Setenv("VAR_B", "from-server")
	t.Setenv("VAR_C", "from-server")
	t.Setenv("NOT_PASSED", "from-server")
	demo := demoAgent()
	demo.Env = map[string]string{"VAR_A": "from-registry", "VAR_B": "from-registry", "VAR_C": "from-registry", "VAR_D": "from-registry", "HOME": "/registry/home"}
	demo.PassEnv = []string{"VAR_B", "VAR_C", "VAR_D", "VAR_MISSING"}
	e := newEnv(t, func(c *coordinator.Config) { c.Agents = registry.Registry{"demo": demo} })
	sb := e.create(sandbox.CreateParams{
		Env:     map[string]string{"VAR_C": "from-sandbox", "VAR_D": "from-sandbox"},
		Secrets: map[string]string{"VAR_D": "secret-value-0123456789"},
	})
	text := ""
	for _, ev := range e.turnOf(sb, "env") {
		if d, ok := ev.Data.(*sandbox.MessageCompleted); ok {
			text = d.Text
		}
	}
	for _, want := range []string{"VAR_A=from-registry", "VAR_B=from-server", "VAR_C=from-sandbox", "VAR_D=[REDACTED]", "HOME=/registry/home"} {
		if !strings.Contains(text, want+" ") && !strings.Contains(text, want+".") {
			t.Errorf("the agent's environment lacks %s: %q", want, text)
		}
	}
	for _, bad := range []string{"NOT_PASSED", "VAR_MISSING"} {
		if strings.Contains(text, bad) {
			t.Errorf("the agent's environment has %s: %q", bad, text)
		}
	}
}

// TestAgentsList lists the agents with whether each can start, and
// nothing of their commands or environments.
func TestAgentsList(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) {
		c.Agents["missing"] = registry.Agent{Command: filepath.Join(t.TempDir(), "no-such-agent"), Env: map[string]string{"KEY": "value"}}
		c.Builtins = map[string]coordinator.BuiltinAgent{"inproc": newRecAgent().run}
	})
	got, err := e.co.Agents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.Agent{{Name: "demo", Available: true}, {Name: "inproc", Available: true}, {Name: "missing", Available: false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("agents %+v, want %+v", got, want)
	}
}

// TestNoTurnNoSession lets an agent idle out before its first turn: its
// session held no conversation, so it is not kept, the next boot opens a
// new one without session/load, and nothing is said to be lost. (An agent
// writes a session down with its first message, so loading it would fail.)
func TestNoTurnNoSession(t *testing.T) {
	a := newRecAgent()
	a.failLoad = true
	e := newRecEnv(t, a, func(c *coordinator.Config) { c.AgentIdleTimeout = 50 * time.Millisecond })
	sb := e.create(sandbox.CreateParams{})
	e.waitStatus(sb.ID, sandbox.StatusStopped)
	if got := completed(e.turnOf(sb, "hello")); got.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn = %+v", got)
	}
	if log := e.logText(sb.ID); strings.Contains(log, sandbox.ErrSessionLost) {
		t.Fatalf("a session without turns was reported lost:\n%s", log)
	}
	for i, run := range a.boots() {
		if len(run) < 2 || run[1].Method != "session/new" {
			t.Fatalf("boot %d: %+v, want initialize and session/new: no session had a turn before it", i+1, run)
		}
	}
}
