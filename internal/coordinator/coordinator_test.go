package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The test binary doubles as the demo agent: run with the argument
// "sparkles-test-agent" it speaks ACP on stdin/stdout.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "sparkles-test-agent" {
		err := agent.RunDemo(context.Background(), os.Stdin, os.Stdout, os.Environ())
		if errors.Is(err, agent.ErrCrash) {
			os.Exit(3)
		}
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The agents get the server's HOME (agentEnv); the demo keeps its
	// sessions there, which is no place for tests to write.
	home, err := os.MkdirTemp("", "sparkles-coordinator-home-")
	if err != nil {
		panic(err)
	}
	os.Setenv("HOME", home)
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}

type env struct {
	t     *testing.T
	dir   string
	store *boltstore.Store
	co    *coordinator.Coordinator
	cfg   coordinator.Config
}

func demoAgent() registry.Agent {
	return registry.Agent{Command: os.Args[0], Args: []string{"sparkles-test-agent"}}
}

func newEnv(t *testing.T, tweak func(*coordinator.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	st := bolttest.MustOpenAt(t, filepath.Join(dir, "sparkles.db"), boltstore.Options{})
	cfg := coordinator.Config{
		Store:         st,
		DataDir:       dir,
		Agents:        registry.Registry{"demo": demoAgent()},
		FlushInterval: 5 * time.Millisecond,
		BootTimeout:   20 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	co, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, store: st, co: co, cfg: cfg}
	t.Cleanup(func() {
		e.co.Close()
		if err := e.store.Check(); err != nil {
			t.Errorf("bbolt check: %v", err)
		}
		e.store.Close()
	})
	return e
}

// workDir is the workspace of sandbox id.
func (e *env) workDir(id string) string { return datadir.Dir(e.cfg.DataDir).Sandbox(id).Work() }

func (e *env) create(p sandbox.CreateParams) sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.co.CreateSandbox(context.Background(), p)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

// waitFor reads the log of id from after until an event satisfies done,
// returning every event read. It fails the test after a generous deadline.
func (e *env) waitFor(id string, after uint64, done func(sandbox.Event) bool) []sandbox.Event {
	e.t.Helper()
	deadline := time.After(30 * time.Second)
	var out []sandbox.Event
	for {
		ch := e.store.Wait(id)
		recs, err := e.store.Read(context.Background(), id, after, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range recs {
			ev, err := r.Decode()
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, ev)
			after = r.ID
			if done(ev) {
				return out
			}
		}
		if len(recs) > 0 {
			continue
		}
		select {
		case <-ch:
		case <-deadline:
			e.t.Fatalf("timed out; events so far: %s", types(out))
		}
	}
}

// waitStatus waits until the sandbox has the given status.
func (e *env) waitStatus(id, status string) sandbox.Sandbox {
	e.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ch := e.store.Wait(id)
		sb, err := e.store.Sandbox(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if sb.Status == status {
			return sb
		}
		select {
		case <-ch:
		case <-deadline:
			e.t.Fatalf("sandbox status %q (%s), want %q", sb.Status, sb.StatusDetail, status)
		}
	}
}

func isType(typ sandbox.Type) func(sandbox.Event) bool {
	return func(ev sandbox.Event) bool { return ev.Type == typ }
}

func types(evs []sandbox.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, string(ev.Type))
	}
	return strings.Join(s, " ")
}

// squash collapses runs of the same event type, so sequences can be
// compared without depending on how chunks were coalesced.
func squash(evs []sandbox.Event) string {
	var s []string
	for _, ev := range evs {
		if len(s) == 0 || s[len(s)-1] != string(ev.Type) {
			s = append(s, string(ev.Type))
		}
	}
	return strings.Join(s, " ")
}

func completed(evs []sandbox.Event) *sandbox.TurnCompleted {
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.TurnCompleted); ok {
			return d
		}
	}
	return nil
}

func TestTurn(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	if got, want := sb.Agent, "demo"; got != want {
		t.Fatalf("agent = %q, want %q", got, want)
	}
	e.waitStatus(sb.ID, sandbox.StatusReady)
	os.WriteFile(filepath.Join(datadir.Dir(e.dir).Sandbox(sb.ID).Work(), "README.md"), []byte("# hello\n"), 0o600)

	turn, err := e.co.StartTurn(context.Background(), sb.ID, "hello there")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := turn.Status, sandbox.TurnRunning; got != want {
		t.Fatalf("turn status = %q, want %q", got, want)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	if got, want := squash(evs), "turn.started message.updated tool.updated message.updated message.completed turn.completed"; got != want {
		t.Fatalf("event order:\ngot  %s\nwant %s", got, want)
	}
	var kinds []string
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.MessageUpdated); ok && (len(kinds) == 0 || kinds[len(kinds)-1] != d.Kind) {
			kinds = append(kinds, d.Kind)
		}
		if ev.TurnID != turn.ID {
			t.Fatalf("%s has turn_id %q, want %q", ev.Type, ev.TurnID, turn.ID)
		}
	}
	if got, want := strings.Join(kinds, ","), "reasoning,text"; got != want {
		t.Fatalf("part kinds = %s, want %s", got, want)
	}
	if got, want := completed(evs).Status, sandbox.TurnSucceeded; got != want {
		t.Fatalf("turn status = %q, want %q", got, want)
	}
	got, err := e.co.Turn(context.Background(), sb.ID, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sandbox.TurnSucceeded || got.CompletedAt == nil {
		t.Fatalf("GET turn = %+v", got)
	}
	// The next turn reuses the running agent.
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "and again"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
}

func approvalOf(evs []sandbox.Event) *sandbox.ApprovalRequested {
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.ApprovalRequested); ok {
			return d
		}
	}
	return nil
}

func lastTool(evs []sandbox.Event) *sandbox.ToolUpdated {
	var t *sandbox.ToolUpdated
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.ToolUpdated); ok {
			t = d
		}
	}
	return t
}

func TestApproval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decision string
		tool     string
		file     bool
	}{
		{"Approve", "approve", sandbox.ToolCompleted, true},
		{"Deny", "deny", sandbox.ToolFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			sb := e.create(sandbox.CreateParams{})
			turn, err := e.co.StartTurn(context.Background(), sb.ID, "please write notes.txt")
			if err != nil {
				t.Fatal(err)
			}
			evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeApprovalRequested))
			appr := approvalOf(evs)
			if appr.Kind != sandbox.ToolKindEdit || len(appr.Options) < 2 {
				t.Fatalf("approval = %+v", appr)
			}
			a, err := e.co.Decide(context.Background(), sb.ID, appr.ApprovalID, sandbox.Decision{Decision: tc.decision})
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != sandbox.ApprovalDone || a.TurnID != turn.ID {
				t.Fatalf("approval resource = %+v", a)
			}
			_, err = e.co.Decide(context.Background(), sb.ID, appr.ApprovalID, sandbox.Decision{Decision: tc.decision})
			if got, want := sandbox.ErrorType(err), sandbox.EApprovalResolved; got != want {
				t.Fatalf("second decision: %v, want %s", err, want)
			}
			rest := e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
			var resolved *sandbox.ApprovalResolved
			for _, ev := range rest {
				if d, ok := ev.Data.(*sandbox.ApprovalResolved); ok {
					resolved = d
				}
			}
			wantDecision := map[string]string{"approve": sandbox.DecisionApproved, "deny": sandbox.DecisionDenied}[tc.decision]
			if resolved == nil || resolved.Decision != wantDecision || resolved.Reason != sandbox.ReasonUser {
				t.Fatalf("approval.resolved = %+v", resolved)
			}
			if got := lastTool(rest); got == nil || got.Status != tc.tool {
				t.Fatalf("last tool state = %+v, want status %s", got, tc.tool)
			}
			_, err = os.Stat(filepath.Join(datadir.Dir(e.dir).Sandbox(sb.ID).Work(), "notes.txt"))
			if got := err == nil; got != tc.file {
				t.Fatalf("notes.txt exists = %v, want %v", got, tc.file)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	turn, err := e.co.StartTurn(context.Background(), sb.ID, "hang after one chunk")
	if err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeMessageUpdated))
	t.Run("ErrTurnInProgress", func(t *testing.T) {
		// The turn hangs until canceled, so it is still running here.
		_, err := e.co.StartTurn(context.Background(), sb.ID, "again")
		if got, want := sandbox.ErrorType(err), sandbox.ETurnInProgress; got != want {
			t.Fatalf("second turn: %v, want %s", err, want)
		}
	})
	if _, err := e.co.CancelTurn(context.Background(), sb.ID, turn.ID); err != nil {
		t.Fatal(err)
	}
	rest := e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
	c := completed(rest)
	if c.Status != sandbox.TurnCanceled || c.StopReason != sandbox.StopCanceled {
		t.Fatalf("turn.completed = %+v", c)
	}
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.co.CancelTurn(context.Background(), sb.ID, "turn_nope")
		if got, want := sandbox.ErrorType(err), sandbox.ENotFound; got != want {
			t.Fatalf("cancel unknown turn: %v, want %s", err, want)
		}
	})
}

func TestCrash(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "crash"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	var sbErr *sandbox.SandboxError
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			sbErr = d
		}
	}
	if sbErr == nil || sbErr.Code != sandbox.ErrAgentExited {
		t.Fatalf("sandbox.error = %+v; events %s", sbErr, types(evs))
	}
	if c := completed(evs); c.Status != sandbox.TurnFailed || c.Error == nil || c.Error.Code != sandbox.ErrAgentExited {
		t.Fatalf("turn.completed = %+v", c)
	}
	e.waitStatus(sb.ID, sandbox.StatusStopped)
	// The next turn boots the agent again.
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "hello"); err != nil {
		t.Fatal(err)
	}
	rest := e.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
	if c := completed(rest); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn after crash = %+v", c)
	}
}

func TestTurnTimeout(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.TurnTimeout = 300 * time.Millisecond })
	sb := e.create(sandbox.CreateParams{})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "hang"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	c := completed(evs)
	if c.Status != sandbox.TurnFailed || c.Error == nil || c.Error.Code != sandbox.ErrTurnTimeout {
		t.Fatalf("turn.completed = %+v", c)
	}
}

func TestBootFailure(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) {
		c.Agents["broken"] = registry.Agent{Command: filepath.Join(t.TempDir(), "no-such-agent")}
	})
	sb := e.create(sandbox.CreateParams{Agent: "broken"})
	turn, err := e.co.StartTurn(context.Background(), sb.ID, "hello")
	if err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	if got, want := squash(evs), "sandbox.error turn.started turn.completed"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	if d := evs[0].Data.(*sandbox.SandboxError); d.Code != sandbox.ErrAgentStartFailed {
		t.Fatalf("sandbox.error = %+v", d)
	}
	// The boot at create may fail before or after the turn arrives, so there
	// are one or two sandbox.error events before the turn's.
	for _, ev := range evs {
		if ev.Type == sandbox.TypeTurnStarted && ev.TurnID != turn.ID {
			t.Fatalf("turn.started for %q, want %q", ev.TurnID, turn.ID)
		}
	}
	e.waitStatus(sb.ID, sandbox.StatusFailed)
	t.Run("ErrUnknownAgent", func(t *testing.T) {
		_, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{Agent: "nope"})
		if got, want := sandbox.ErrorType(err), sandbox.EInvalidRequest; got != want {
			t.Fatalf("unknown agent: %v, want %s", err, want)
		}
	})
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "hang"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, 0, isType(sandbox.TypeMessageUpdated))
	got, err := e.co.DeleteSandbox(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sandbox.StatusDeleted || got.CurrentTurn != nil {
		t.Fatalf("deleted sandbox = %+v", got)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	if c := completed(evs); c.Status != sandbox.TurnCanceled {
		t.Fatalf("turn.completed = %+v", c)
	}
	_, err = e.co.StartTurn(context.Background(), sb.ID, "hello")
	if got, want := sandbox.ErrorType(err), sandbox.EConflict; got != want {
		t.Fatalf("turn on deleted sandbox: %v, want %s", err, want)
	}
}

// TestRestart stops the store under a running turn, as a crash would, then
// opens a new coordinator on the same file.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sparkles.db")
	st := bolttest.MustOpenAt(t, path, boltstore.Options{})
	cfg := coordinator.Config{Store: st, DataDir: dir, Agents: registry.Registry{"demo": demoAgent()}, FlushInterval: 5 * time.Millisecond}
	co, _ := coordinator.New(cfg)
	e := &env{t: t, store: st, co: co}
	sb := e.create(sandbox.CreateParams{})
	turn, err := co.StartTurn(context.Background(), sb.ID, "please write x.txt and hang")
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, 0, isType(sandbox.TypeApprovalRequested))
	st.Close() // nothing more reaches the file, as if the process died here
	co.Close()

	st2 := bolttest.MustOpenAt(t, path, boltstore.Options{})
	defer st2.Close()
	cfg.Store = st2
	co2, _ := coordinator.New(cfg)
	defer co2.Close()
	if err := co2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, store: st2, co: co2}
	evs := e2.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	var sbErr *sandbox.SandboxError
	var resolved *sandbox.ApprovalResolved
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case *sandbox.SandboxError:
			sbErr = d
		case *sandbox.ApprovalResolved:
			resolved = d
		}
	}
	if sbErr == nil || sbErr.Code != sandbox.ErrCoordinatorRestarted {
		t.Fatalf("sandbox.error = %+v", sbErr)
	}
	if resolved == nil || resolved.Decision != sandbox.DecisionFailed {
		t.Fatalf("approval.resolved = %+v", resolved)
	}
	if c := completed(evs); c.Status != sandbox.TurnFailed || c.Error.Code != sandbox.ErrCoordinatorRestarted {
		t.Fatalf("turn.completed = %+v", c)
	}
	got, _ := co2.Turn(context.Background(), sb.ID, turn.ID)
	if got.Status != sandbox.TurnFailed {
		t.Fatalf("turn after restart = %+v", got)
	}
	sb2, _ := st2.Sandbox(context.Background(), sb.ID)
	if sb2.Status != sandbox.StatusStopped || sb2.CurrentTurn != nil {
		t.Fatalf("sandbox after restart = %+v", sb2)
	}
	// The next turn boots the agent again.
	if _, err := co2.StartTurn(context.Background(), sb.ID, "hello"); err != nil {
		t.Fatal(err)
	}
	rest := e2.waitFor(sb.ID, evs[len(evs)-1].ID, isType(sandbox.TypeTurnCompleted))
	if c := completed(rest); c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn after restart = %+v", c)
	}
}

func TestSecretsNeverLeave(t *testing.T) {
	const canary = "canary-7f3a9c-do-not-leak"
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{
		Env:     map[string]string{"PLAIN": "visible-value"},
		Secrets: map[string]string{"API_KEY": canary},
	})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "show me your env"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	recs, err := e.store.Read(context.Background(), sb.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, r := range recs {
		all.Write(r.JSON)
	}
	for _, v := range []any{must(e.store.Sandbox(context.Background(), sb.ID)), must(e.store.State(context.Background(), sb.ID))} {
		b, _ := json.Marshal(v)
		all.Write(b)
	}
	text := all.String()
	if strings.Contains(text, canary) {
		t.Fatal("the secret value left the server")
	}
	if !strings.Contains(text, "[REDACTED]") {
		t.Fatal("the demo agent echoed its env, but nothing was redacted: the test proves nothing")
	}
	if !strings.Contains(text, "visible-value") {
		t.Fatal("the plain env value is missing from the echo: the demo agent did not echo its env")
	}
	for _, marker := range []string{"rawInput", "rawOutput", "sessionId", "_meta", "SPARKLES_TEST"} {
		if strings.Contains(text, marker) {
			t.Fatalf("%q appears in public output", marker)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestApprovalTimeout(t *testing.T) {
	e := newEnv(t, func(c *coordinator.Config) { c.ApprovalTimeout = 200 * time.Millisecond })
	sb := e.create(sandbox.CreateParams{})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "please write late.txt"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	var resolved *sandbox.ApprovalResolved
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.ApprovalResolved); ok {
			resolved = d
		}
	}
	if resolved == nil || resolved.Decision != sandbox.DecisionCanceled || resolved.Reason != sandbox.ReasonTimeout {
		t.Fatalf("approval.resolved = %+v; events %s", resolved, types(evs))
	}
	if got := lastTool(evs); got == nil || got.Status != sandbox.ToolFailed {
		t.Fatalf("tool after an expired approval = %+v", got)
	}
}

// TestTokensNeverLeave: whatever the agent prints, the server token and the
// sandbox's stream token (Config.Redact) are redacted like secrets, and so
// is anything shaped like a Sparkles token; a secret value put in metadata
// is not answered either.
func TestTokensNeverLeave(t *testing.T) {
	const (
		serverToken = "operator-chosen-token-42"
		streamToken = "st_c_01m8rfc0kf6kxhnc3d6nzv370p.AbCdEfGhIjKlMnOpQrStUvWx"
		shaped      = "spk_AbCdEfGhIjKlMnOpQrStUvWx0123"
		canary      = "canary-91c2-metadata"
	)
	e := newEnv(t, func(cfg *coordinator.Config) {
		cfg.Redact = func(string) []string { return []string{serverToken, streamToken} }
	})
	// The demo agent echoes its environment: the tokens reach it the way a
	// hostile agent would print them after reading them somewhere.
	sb := e.create(sandbox.CreateParams{
		Env:      map[string]string{"A": serverToken, "B": streamToken, "C": shaped, "PLAIN": "visible-value"},
		Secrets:  map[string]string{"K": canary},
		Metadata: map[string]string{"note": "key is " + canary + " and " + shaped, "name": "plain name"},
	})
	if _, err := e.co.StartTurn(context.Background(), sb.ID, "show me your env"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, 0, isType(sandbox.TypeTurnCompleted))
	recs, err := e.store.Read(context.Background(), sb.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, r := range recs {
		all.Write(r.JSON)
	}
	got := must(e.store.Sandbox(context.Background(), sb.ID))
	for _, v := range []any{got, must(e.store.State(context.Background(), sb.ID))} {
		b, _ := json.Marshal(v)
		all.Write(b)
	}
	text := all.String()
	for _, leak := range []string{serverToken, streamToken, shaped, canary} {
		if strings.Contains(text, leak) {
			t.Errorf("%q left the server", leak)
		}
	}
	if !strings.Contains(text, "visible-value") {
		t.Fatal("the demo agent did not echo its env: the test proves nothing")
	}
	if got, want := got.Metadata["name"], "plain name"; got != want {
		t.Errorf("metadata name %q, want %q", got, want)
	}
	if got, want := got.Metadata["note"], "key is [REDACTED] and [REDACTED]"; got != want {
		t.Errorf("metadata note %q, want %q", got, want)
	}
}
