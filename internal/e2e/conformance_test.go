package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agentsuite"
	"github.com/sparkles-dev/sparkles/internal/fakemodel"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// conformanceAgent is one agent the conformance suite runs: the built-in
// demo agent or a real adapter pointed at a fake model API.
type conformanceAgent struct {
	name     string
	register []string // --agent flags for serve; none for the built-in demo
	env      map[string]string
	secrets  map[string]string
	script   *fakemodel.Script // nil for the demo agent, which has no model

	// What a write of the file named puts in it, and the text the agent
	// streams for it ("" when not checked).
	content  func(prompt string) string
	wantText func(file string) string

	slowPrompt string // a prompt that streams for long enough to cancel it
	shell      bool   // the agent has a shell tool
	quirks     agentsuite.Quirks
	// grant is a directory the confined agent may read, where a scenario
	// puts a program the agent runs (the MCP server); "" for the demo,
	// which is not confined.
	grant string
	sends agentsuite.Sends
	// plan is the last plan the agent sends for planPrompt (contents and
	// statuses), when sends.Plans.
	plan []sandbox.PlanEntry
	// modes names a mode the agent offers to switch to between turns.
	modes agentsuite.Modes
	// images: the agent takes image blocks (conformance_image_test.go).
	images bool
}

// planPrompt asks for a plan: fakemodel's "plan" makes the model call the
// agent's to-do tool; the demo agent's "plan" and "usage" make it send a
// plan of its steps and its usage.
const planPrompt = "please plan the work and report usage"

// TestAgentConformance runs one set of scenarios, all in one sandbox and
// through the public HTTP API, against the demo agent and every real
// adapter: approve (file written, text as the model streamed it, tool states
// in order), approve again in the next turn (a plain approve grants one
// use), deny, cancel while an approval waits, cancel mid-stream, a model
// error, a shell command, and a SIGKILL of the server mid-turn with the
// stream resumed across it. Every event and answer is checked for raw
// fields, secrets and host paths. A new adapter is one more
// agentsuite.Adapter.
//
// The real adapters are npm packages that .ci/run installs; without them the
// test skips (fails under CI=true) and says how to install them.
func TestAgentConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every agent through every scenario")
	}
	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		runConformance(t, conformanceAgent{
			name: "demo",
			content: func(prompt string) string {
				return "Written by the Sparkles demo agent.\nPrompt: " + prompt + "\n"
			},
			slowPrompt: "slow, then hang",
			sends:      agentsuite.Sends{Plans: true, Usage: true},
			plan: []sandbox.PlanEntry{
				{Content: "Read README.md", Status: sandbox.PlanCompleted},
				{Content: "Reply", Status: sandbox.PlanCompleted},
			},
			modes:  agentsuite.Modes{Switch: "plan"},
			images: true,
		})
	})
	dir := agentsuite.Dir()
	for _, a := range agentsuite.All() {
		t.Run(a.Name, func(t *testing.T) {
			argv, ok := a.Command(dir)
			if !ok {
				msg := fmt.Sprintf("%s is not installed in %s: npm install --prefix %s %s (or run .ci/run; SPARKLES_AGENTS_DIR picks another folder)", a.Package, dir, dir, a.Package)
				if os.Getenv("CI") == "true" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			script := &fakemodel.Script{}
			model := httptest.NewServer(a.Model(script))
			t.Cleanup(model.Close)
			home := t.TempDir()
			env, secrets, err := a.Setup(model.URL, home)
			if err != nil {
				t.Fatal(err)
			}
			giveToAgents(t, home)
			runConformance(t, conformanceAgent{
				name: a.Name,
				// The adapter's config files (a HOME, a CODEX_HOME) are
				// the test's: the confined agent is let write them, as an
				// operator lets an agent keep state outside its sandbox.
				// The fake model listens on the host's loopback, which a
				// confined agent reaches only by a host port.
				register: []string{"--agent", a.Name + "=" + strings.Join(argv, " "), "--agent-write-path", home, "--agent-host-port", urlPort(t, model.URL)},
				env:      env,
				secrets:  secrets,
				script:   script,
				content:  func(string) string { return fakemodel.WriteContent },
				wantText: func(file string) string {
					return fakemodel.BeforeText(file) + "\n\n" + fakemodel.AfterText(file)
				},
				slowPrompt: "slow",
				shell:      true,
				quirks:     a.Quirks,
				grant:      home,
				sends:      a.Sends,
				plan:       fakemodelPlan(),
				modes:      a.Modes,
				images:     a.Images,
			})
		})
	}
}

func runConformance(t *testing.T, a conformanceAgent) {
	top := t // the server outlives every scenario
	dataDir := t.TempDir()
	const token = "spk_conformance_test_token_0123456789"
	args := append([]string{"--flush-interval", "20ms", "--boot-timeout", "90s"}, a.register...)
	p := startServe(t, cliEnv(t), dataDir, token, args...)
	p.waitServing()
	t.Cleanup(func() { killStrays(t, dataDir) })
	// Every scenario runs with the agent confined, as serve runs it by
	// default.
	var ready struct{ Isolation string }
	p.mustCall(http.MethodGet, "/readyz", nil, http.StatusOK, &ready)
	if ready.Isolation == "" || ready.Isolation == "off" {
		t.Fatalf("agents are not confined (isolation %q)", ready.Isolation)
	}

	secrets := map[string]string{"CONFORMANCE_CANARY": "canary-7d1f0e9b2c"}
	for k, v := range a.secrets {
		secrets[k] = v
	}
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{
		"agent": a.name, "env": a.env, "secrets": secrets, "tool_output": true,
	}, http.StatusCreated, &sb)
	work := filepath.Join(dataDir, "sandboxes", sb.ID, "work")

	rec := newRecorder(t, sb.ID, token)
	rec.follow(p)
	s := &scenarioRun{t: t, a: a, p: p, rec: rec, id: sb.ID, work: work}
	s.restart = func(sig syscall.Signal) {
		if sig == syscall.SIGKILL {
			s.p.kill()
		} else if code := s.p.signal(sig); code != 0 {
			top.Errorf("serve exited %d after %v", code, sig)
		}
		s.p = startServe(top, cliEnv(top), dataDir, token, args...)
		s.p.waitServing()
		rec.follow(s.p)
	}

	t.Run("Approve", func(t *testing.T) {
		s.t = t
		prompt := "please write notes.txt"
		turn, appr := s.untilApproval(prompt)
		s.decide(appr, "approve")
		done := s.completed(turn)
		s.wantStatus(done, sandbox.TurnSucceeded)
		s.wantFile("notes.txt", a.content(prompt))
		s.wantChanges(turn, done, "notes.txt", a.content(prompt))
		// Every adapter reports usage one way or another (the prompt
		// answer, usage_update, Gemini's _meta), and so does the demo.
		if done.Usage == nil || done.Usage.TotalTokens == 0 && done.Usage.ContextTokens == 0 {
			t.Errorf("turn.completed usage %+v: the agent's usage was not read", done.Usage)
		}
		resolved := rec.first(turn, sandbox.TypeApprovalResolved)
		var r sandbox.ApprovalResolved
		mustDecode(t, resolved, &r)
		if got, want := optionKind(t, appr, r.OptionID), sandbox.OptionAllowOnce; r.Decision != sandbox.DecisionApproved || got != want {
			t.Errorf("approval resolved %s with a %s option, want approved with %s", r.Decision, got, want)
		}
		s.wantToolStates(turn, "pending", "running", "completed")
		s.wantMessage(turn, "notes.txt")
	})
	t.Run("ApproveAgain", func(t *testing.T) {
		s.t = t
		prompt := "please write second.txt"
		turn, appr := s.untilApproval(prompt) // a plain approve granted one use: it asks again
		s.decide(appr, "approve")
		s.wantStatus(s.completed(turn), sandbox.TurnSucceeded)
		s.wantFile("second.txt", a.content(prompt))
	})
	t.Run("Deny", func(t *testing.T) {
		s.t = t
		turn, appr := s.untilApproval("please write denied.txt")
		s.decide(appr, "deny")
		s.completed(turn)
		var r sandbox.ApprovalResolved
		mustDecode(t, rec.first(turn, sandbox.TypeApprovalResolved), &r)
		if r.Decision != sandbox.DecisionDenied || optionKind(t, appr, r.OptionID) != sandbox.OptionRejectOnce {
			t.Errorf("approval resolved %s with %s, want denied with reject_once", r.Decision, optionKind(t, appr, r.OptionID))
		}
		s.wantNoFile("denied.txt")
	})
	t.Run("Shell", func(t *testing.T) {
		s.t = t
		if !a.shell {
			t.Skip("the agent has no shell tool")
		}
		turn, appr := s.untilApproval("please shell ran.txt")
		s.decide(appr, "approve")
		s.wantStatus(s.completed(turn), sandbox.TurnSucceeded)
		if _, err := os.Stat(filepath.Join(work, "ran.txt")); err != nil {
			t.Errorf("the shell command did not run: %v", err)
		}
		s.wantToolOutput(turn)
	})
	t.Run("Plan", func(t *testing.T) {
		s.t = t
		turn := s.startTurn(planPrompt)
		done := s.completedApproving(turn)
		s.wantStatus(done, sandbox.TurnSucceeded)
		s.wantPlan(turn)
		s.wantUsage(turn, done)
	})
	t.Run("CancelWhileApprovalWaits", func(t *testing.T) {
		s.t = t
		turn, _ := s.untilApproval("please write waiting.txt")
		s.cancel(turn)
		s.wantStatus(s.completed(turn), sandbox.TurnCanceled)
		var r sandbox.ApprovalResolved
		mustDecode(t, rec.first(turn, sandbox.TypeApprovalResolved), &r)
		if r.Decision != sandbox.DecisionCanceled || r.Reason != sandbox.ReasonTurnCanceled {
			t.Errorf("approval resolved %s (%s), want canceled (turn_canceled)", r.Decision, r.Reason)
		}
		s.wantNoFile("waiting.txt")
	})
	s.freshAgentAfterInterrupt()
	t.Run("CancelMidStream", func(t *testing.T) {
		s.t = t
		turn := s.startTurn(a.slowPrompt)
		rec.wait(turn, sandbox.TypeMessageUpdated)
		s.cancel(turn)
		s.wantStatus(s.completed(turn), sandbox.TurnCanceled)
	})
	s.freshAgentAfterInterrupt()
	t.Run("ModelError", func(t *testing.T) {
		s.t = t
		if a.script == nil {
			t.Skip("the demo agent has no model")
		}
		turn := s.startTurn("please fail")
		done := s.completed(turn)
		want := a.quirks.ModelErrorStatus
		if want == "" {
			want = sandbox.TurnFailed
		}
		s.wantStatus(done, want)
		if want == sandbox.TurnFailed {
			if done.Error == nil || done.Error.Code != "agent_error" {
				t.Errorf("turn.completed error %+v, want code agent_error", done.Error)
			}
		}
	})
	s.freshAgentAfterInterrupt()
	t.Run("RestartMidTurn", func(t *testing.T) {
		s.t = t
		turn := s.startTurn(a.slowPrompt)
		rec.wait(turn, sandbox.TypeMessageUpdated)
		s.restart(syscall.SIGKILL)
		done := s.completed(turn)
		s.wantStatus(done, sandbox.TurnFailed)
		if done.Error == nil || done.Error.Code != sandbox.ErrCoordinatorRestarted {
			t.Errorf("turn.completed error %+v, want %s", done.Error, sandbox.ErrCoordinatorRestarted)
		}
		next := s.startTurn("hello")
		s.wantStatus(s.completed(next), sandbox.TurnSucceeded)
	})
	t.Run("Mode", func(t *testing.T) {
		s.t = t
		s.switchMode()
	})
	t.Run("Log", func(t *testing.T) {
		s.t = t
		log := readEventLog(t, s.p, sb.ID)
		rec.wantSameAs(log)
		for _, ev := range log {
			b, _ := json.Marshal(ev)
			s.wantClean("event "+strconv.FormatUint(ev.ID, 10), b)
		}
		checkInvariants(t, log)
		for _, path := range []string{"/v1/sandboxes/" + sb.ID, "/v1/sandboxes", "/v1/sandboxes/" + sb.ID + "/events?since=0&limit=1000"} {
			var raw json.RawMessage
			s.p.mustCall(http.MethodGet, path, nil, http.StatusOK, &raw)
			s.wantClean("GET "+path, raw)
		}
	})
	t.Run("MCPServer", func(t *testing.T) {
		s.t = t
		s.mcpServer(token)
	})
	t.Run("Image", func(t *testing.T) {
		s.t = t
		s.image()
	})
}

// scenarioRun is the state the scenarios of one agent share.
type scenarioRun struct {
	t    *testing.T
	a    conformanceAgent
	p    *serveProc
	rec  *recorder
	id   string
	work string
	// restart ends the server with sig and starts it again on the same
	// data dir; the recorder follows the new one from where it was.
	restart func(sig syscall.Signal)
}

// freshAgentAfterInterrupt gives an agent whose process cannot go on after
// an interrupted turn (Quirks.StaleAfterInterrupt) a new one, by a graceful
// restart of the server: the sandbox stays, its next turn boots the agent.
func (s *scenarioRun) freshAgentAfterInterrupt() {
	if s.a.quirks.StaleAfterInterrupt {
		s.restart(syscall.SIGTERM)
	}
}

const scenarioWait = 90 * time.Second

func (s *scenarioRun) startTurn(input string) string {
	s.t.Helper()
	var turn sandbox.Turn
	s.p.mustCall(http.MethodPost, "/v1/sandboxes/"+s.id+"/turns", map[string]string{"input": input}, http.StatusAccepted, &turn)
	return turn.ID
}

// untilApproval starts a turn and waits for its approval request.
func (s *scenarioRun) untilApproval(input string) (string, sandbox.ApprovalRequested) {
	s.t.Helper()
	turn := s.startTurn(input)
	var a sandbox.ApprovalRequested
	mustDecode(s.t, s.rec.wait(turn, sandbox.TypeApprovalRequested), &a)
	if a.Title == "" || len(a.Options) == 0 {
		s.t.Errorf("approval %+v has no title or no options", a)
	}
	return turn, a
}

func (s *scenarioRun) decide(a sandbox.ApprovalRequested, decision string) {
	s.t.Helper()
	s.p.mustCall(http.MethodPost, "/v1/sandboxes/"+s.id+"/approvals/"+a.ApprovalID, map[string]string{"decision": decision}, http.StatusOK, nil)
}

func (s *scenarioRun) cancel(turn string) {
	s.t.Helper()
	s.p.mustCall(http.MethodPost, "/v1/sandboxes/"+s.id+"/turns/"+turn+"/cancel", nil, http.StatusAccepted, nil)
}

func (s *scenarioRun) completed(turn string) sandbox.TurnCompleted {
	s.t.Helper()
	var d sandbox.TurnCompleted
	mustDecode(s.t, s.rec.wait(turn, sandbox.TypeTurnCompleted), &d)
	return d
}

func (s *scenarioRun) wantStatus(d sandbox.TurnCompleted, want string) {
	s.t.Helper()
	if d.Status != want {
		s.t.Errorf("turn %s (stop %s, error %+v), want %s; agent log:\n%s", d.Status, d.StopReason, d.Error, want, s.agentLog())
	}
}

func (s *scenarioRun) wantFile(name, content string) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.work, name))
	if err != nil {
		s.t.Errorf("the agent did not write %s: %v", name, err)
		return
	}
	if string(b) != content {
		s.t.Errorf("%s holds %q, want %q", name, b, content)
	}
}

// wantChanges checks that the turn's changes list the file it wrote as
// added, and that the turn's diff adds exactly its content.
func (s *scenarioRun) wantChanges(turn string, d sandbox.TurnCompleted, name, content string) {
	s.t.Helper()
	found := false
	if d.Changes != nil {
		for _, f := range d.Changes.Files {
			found = found || f == sandbox.FileChange{Path: name, Change: sandbox.ChangeAdded}
		}
	}
	if !found {
		s.t.Errorf("turn.completed changes %+v do not list %s as added", d.Changes, name)
	}
	status, _, body := s.p.send(http.MethodGet, "/v1/sandboxes/"+s.id+"/turns/"+turn+"/diff", nil)
	if status != http.StatusOK {
		s.t.Errorf("GET diff: %d %s", status, body)
		return
	}
	if got := addedBy(string(body), name); got != content {
		s.t.Errorf("the diff adds %q to %s, want %q; diff:\n%s", got, name, content, body)
	}
}

// addedBy is what a unified diff adds to a new file: its + lines, the
// last one without a newline when the diff says so.
func addedBy(diff, name string) string {
	var out strings.Builder
	in := false
	lines := strings.Split(diff, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "diff --git "):
			in = l == "diff --git a/"+name+" b/"+name
		case !in || strings.HasPrefix(l, "+++ "):
		case strings.HasPrefix(l, "+"):
			out.WriteString(l[1:])
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], `\ No newline`) {
				out.WriteString("\n")
			}
		}
	}
	return out.String()
}

func (s *scenarioRun) wantNoFile(name string) {
	s.t.Helper()
	if _, err := os.Stat(filepath.Join(s.work, name)); !errors.Is(err, os.ErrNotExist) {
		s.t.Errorf("%s was written although the write was not approved (%v)", name, err)
	}
}

// wantToolStates checks that the turn's tool went through the states in
// order (repeats and states in between allowed).
func (s *scenarioRun) wantToolStates(turn string, states ...string) {
	s.t.Helper()
	var seen []string
	for _, f := range s.rec.of(turn, sandbox.TypeToolUpdated) {
		var d sandbox.ToolUpdated
		mustDecode(s.t, f, &d)
		seen = append(seen, d.Status)
	}
	i := 0
	for _, st := range seen {
		if i < len(states) && st == states[i] {
			i++
		}
	}
	if i < len(states) {
		s.t.Errorf("tool states %v, want %v in that order", seen, states)
	}
}

// wantMessage checks the turn's text: every text part, joined, is what the
// model streamed, and the one message.completed is the last message's.
func (s *scenarioRun) wantMessage(turn, file string) {
	s.t.Helper()
	finals := map[string]sandbox.MessageUpdated{}
	var order []string
	for _, f := range s.rec.of(turn, sandbox.TypeMessageUpdated) {
		var d sandbox.MessageUpdated
		mustDecode(s.t, f, &d)
		if d.Kind != sandbox.PartText {
			continue
		}
		if _, ok := finals[d.PartID]; !ok {
			order = append(order, d.PartID)
		}
		finals[d.PartID] = d
	}
	var parts []string
	for _, id := range order {
		parts = append(parts, finals[id].Text)
	}
	done := s.rec.of(turn, sandbox.TypeMessageCompleted)
	if len(done) != 1 {
		s.t.Fatalf("%d message.completed in the turn, want 1", len(done))
	}
	var mc sandbox.MessageCompleted
	mustDecode(s.t, done[0], &mc)
	if s.a.wantText != nil {
		if got, want := strings.Join(parts, "\n\n"), s.a.wantText(file); got != want {
			s.t.Errorf("text parts %q, want %q", got, want)
		}
	}
	var own []string
	for _, p := range mc.Parts {
		if p.Kind == sandbox.PartText {
			own = append(own, p.Text)
		}
	}
	if mc.Text == "" || mc.Text != strings.Join(own, "\n\n") || !strings.HasSuffix(strings.Join(parts, "\n\n"), mc.Text) {
		s.t.Errorf("message.completed text %q: want its own parts joined with blank lines, ending the turn's text %q", mc.Text, parts)
	}
}

// completedApproving waits for the turn's turn.completed, approving each
// approval it requests on the way (Gemini CLI asks before its write_todos).
func (s *scenarioRun) completedApproving(turn string) sandbox.TurnCompleted {
	s.t.Helper()
	deadline := time.After(scenarioWait)
	approved := map[string]bool{}
	for {
		s.rec.mu.Lock()
		changed := s.rec.changed
		s.rec.mu.Unlock()
		for _, f := range s.rec.of(turn, sandbox.TypeApprovalRequested) {
			var a sandbox.ApprovalRequested
			mustDecode(s.t, f, &a)
			if !approved[a.ApprovalID] {
				approved[a.ApprovalID] = true
				s.decide(a, "approve")
			}
		}
		if fs := s.rec.of(turn, sandbox.TypeTurnCompleted); len(fs) > 0 {
			var d sandbox.TurnCompleted
			mustDecode(s.t, fs[0], &d)
			return d
		}
		select {
		case <-changed:
		case <-deadline:
			s.t.Fatalf("no turn.completed in turn %s within %s; received: %s", turn, scenarioWait, s.rec.summary())
		}
	}
}

// fakemodelPlan is the plan fakemodel's "plan" sets, as plan.updated shows
// its contents and statuses.
func fakemodelPlan() []sandbox.PlanEntry {
	var out []sandbox.PlanEntry
	for _, st := range fakemodel.PlanSteps {
		out = append(out, sandbox.PlanEntry{Content: st.Content, Status: st.Status})
	}
	return out
}

// sentOf returns the turn's frames of typ, which an agent sends when its
// adapter row says so: none from one that does not (nil then, an error if
// there are some), at least one from one that does.
func (s *scenarioRun) sentOf(turn string, typ sandbox.Type, sends bool) []frame {
	s.t.Helper()
	fs := s.rec.of(turn, typ)
	if !sends {
		if len(fs) > 0 {
			s.t.Errorf("%d %s from an agent whose adapter row says it sends none", len(fs), typ)
		}
		return nil
	}
	if len(fs) == 0 {
		s.t.Fatalf("no %s in the turn; agent log:\n%s", typ, s.agentLog())
	}
	return fs
}

// wantPlan checks the turn's last plan.updated against the agent's plan
// (contents and statuses), or that there is none for an agent that sends
// no plans.
func (s *scenarioRun) wantPlan(turn string) {
	s.t.Helper()
	fs := s.sentOf(turn, sandbox.TypePlanUpdated, s.a.sends.Plans)
	if fs == nil {
		return
	}
	var p sandbox.PlanUpdated
	mustDecode(s.t, fs[len(fs)-1], &p)
	got := make([]sandbox.PlanEntry, len(p.Entries))
	for i, e := range p.Entries {
		got[i] = sandbox.PlanEntry{Content: e.Content, Status: e.Status}
	}
	if fmt.Sprint(got) != fmt.Sprint(s.a.plan) {
		s.t.Errorf("plan %+v, want %+v", got, s.a.plan)
	}
}

// wantUsage checks the turn's turn.usage events (figures that make sense)
// and that turn.completed carries the last figures; or that there is none
// for an agent that sends no usage_update.
func (s *scenarioRun) wantUsage(turn string, done sandbox.TurnCompleted) {
	s.t.Helper()
	fs := s.sentOf(turn, sandbox.TypeTurnUsage, s.a.sends.Usage)
	if fs == nil {
		return
	}
	for _, f := range fs {
		var u sandbox.TurnUsage
		mustDecode(s.t, f, &u)
		if u.Usage.ContextTokens <= 0 && u.Usage.Cost == nil {
			s.t.Errorf("turn.usage %+v says nothing", u.Usage)
		}
		if c := u.Usage.Cost; c != nil && (c.Amount < 0 || len(c.Currency) != 3) {
			s.t.Errorf("turn.usage cost %+v", c)
		}
	}
	if done.Usage == nil || done.Usage.ContextTokens <= 0 && done.Usage.Cost == nil {
		s.t.Errorf("turn.completed usage %+v: the turn's last figures are missing", done.Usage)
	}
}

// wantClean checks that b holds no raw agent field, no secret, no token and
// no path of the host.
func (s *scenarioRun) wantClean(what string, b []byte) {
	s.t.Helper()
	bad := []string{"rawInput", "rawOutput", "_meta", "canary-7d1f0e9b2c", "spk_conformance_test_token", fakemodel.ToolIDPrefix, filepath.Dir(filepath.Dir(s.work))}
	for _, v := range s.a.secrets {
		bad = append(bad, v)
	}
	for _, w := range bad {
		if w != "" && strings.Contains(string(b), w) {
			s.t.Errorf("%s holds %q: %s", what, w, b)
		}
	}
}

func (s *scenarioRun) agentLog() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(s.work), "agent.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// optionKind is the kind of the approval's option with id.
func optionKind(t *testing.T, a sandbox.ApprovalRequested, id string) string {
	for _, o := range a.Options {
		if o.OptionID == id {
			return o.Kind
		}
	}
	return "none"
}

func mustDecode(t *testing.T, f frame, data any) {
	t.Helper()
	var ev struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(f.data, &ev); err != nil {
		t.Fatalf("decode %s: %v", f.data, err)
	}
	if err := json.Unmarshal(ev.Data, data); err != nil {
		t.Fatalf("decode %s: %v", ev.Data, err)
	}
}

// checkInvariants checks the rules of docs/events.md over a whole log: ids strictly increasing,
// one turn.completed per turn and nothing of a turn after it, one
// approval.resolved per request, at most one message.completed per turn.
func checkInvariants(t *testing.T, log []sandbox.Event) {
	t.Helper()
	var last uint64
	completed := map[string]int{}
	messages := map[string]int{}
	requested, resolved := map[string]bool{}, map[string]int{}
	for _, ev := range log {
		id := ev.ID
		if id <= last {
			t.Errorf("id %d after %d", id, last)
		}
		last = id
		turn := ev.TurnID
		if turn != "" && completed[turn] > 0 {
			t.Errorf("%s %d of turn %s after its turn.completed", ev.Type, id, turn)
		}
		switch d := ev.Data.(type) {
		case *sandbox.TurnCompleted:
			completed[turn]++
		case *sandbox.MessageCompleted:
			if messages[turn]++; messages[turn] > 1 {
				t.Errorf("a second message.completed (%d) in turn %s", id, turn)
			}
			if d.Text == "" {
				t.Errorf("message.completed %d has no text", id)
			}
		case *sandbox.ApprovalRequested:
			requested[d.ApprovalID] = true
		case *sandbox.ApprovalResolved:
			resolved[d.ApprovalID]++
		}
	}
	for id := range requested {
		if resolved[id] != 1 {
			t.Errorf("approval %s resolved %d times, want 1", id, resolved[id])
		}
	}
}

// recorder follows a sandbox's stream across server restarts, resuming
// with Last-Event-ID, and keeps every durable frame it received.
type recorder struct {
	t     *testing.T
	id    string
	token string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a frame arrives
	frames  []frame
	dups    []string
	cancel  context.CancelFunc
	done    chan struct{} // closed when the reader of the last follow has returned
}

func newRecorder(t *testing.T, id, token string) *recorder {
	r := &recorder{t: t, id: id, token: token, changed: make(chan struct{})}
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends the stream being followed and waits until its reader has
// returned, so that nothing it read is recorded after stop.
func (r *recorder) stop() {
	r.mu.Lock()
	if r.cancel != nil {
		r.cancel()
	}
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// follow reads the stream of server p from the last id received on,
// until the server goes away or follow is called again. The stream it
// followed before has ended first: a frame that one read after the cursor
// was taken would otherwise come again on the new stream.
func (r *recorder) follow(p *serveProc) {
	r.stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	var cursor *uint64
	if n := len(r.frames); n > 0 {
		c, _ := strconv.ParseUint(r.frames[n-1].id, 10, 64)
		cursor = &c
	} else {
		cursor = new(uint64)
	}
	r.mu.Unlock()
	resp, err := openStream(ctx, p.streams, p.url, r.token, r.id, cursor)
	if err != nil {
		close(done)
		r.t.Fatalf("open stream: %v", err)
	}
	go func() {
		defer close(done)
		defer resp.Body.Close()
		fr := newSSEFrames(resp.Body)
		for {
			f, err := fr.next()
			if err != nil {
				return
			}
			if f.id == "" {
				continue
			}
			r.mu.Lock()
			if n := len(r.frames); n > 0 {
				prev, _ := strconv.ParseUint(r.frames[n-1].id, 10, 64)
				if id, _ := strconv.ParseUint(f.id, 10, 64); id <= prev {
					r.dups = append(r.dups, f.id)
					r.mu.Unlock()
					continue
				}
			}
			r.frames = append(r.frames, f)
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
	}()
}

// of returns the frames of a turn of one type received so far.
func (r *recorder) of(turn string, typ sandbox.Type) []frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []frame
	for _, f := range r.frames {
		if f.event == string(typ) && frameTurn(f) == turn {
			out = append(out, f)
		}
	}
	return out
}

func (r *recorder) first(turn string, typ sandbox.Type) frame {
	r.t.Helper()
	fs := r.of(turn, typ)
	if len(fs) == 0 {
		r.t.Fatalf("no %s in turn %s", typ, turn)
	}
	return fs[0]
}

// wait returns the first frame of the turn of that type, waiting for it.
func (r *recorder) wait(turn string, typ sandbox.Type) frame {
	r.t.Helper()
	deadline := time.After(scenarioWait)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if fs := r.of(turn, typ); len(fs) > 0 {
			return fs[0]
		}
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("no %s in turn %s within %s; received: %s", typ, turn, scenarioWait, r.summary())
		}
	}
}

func (r *recorder) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, f := range r.frames[max(0, len(r.frames)-30):] {
		fmt.Fprintf(&b, "\n  %s %s %.300s", f.id, f.event, f.data)
	}
	return b.String()
}

// wantSameAs checks that what the stream delivered, across restarts, is the
// log: every logged event was streamed with the same bytes, no id came
// twice, and what was streamed but is no longer logged is a message.updated
// that retention compacted away (docs/retention.md).
func (r *recorder) wantSameAs(log []sandbox.Event) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dups) > 0 {
		r.t.Errorf("the stream delivered ids %v again after a reconnect", r.dups)
	}
	streamed := map[string]frame{}
	for _, f := range r.frames {
		streamed[f.id] = f
	}
	logged := map[string]bool{}
	for _, ev := range log {
		id := strconv.FormatUint(ev.ID, 10)
		logged[id] = true
		b, _ := json.Marshal(ev)
		f, ok := streamed[id]
		switch {
		case !ok && ev.ID <= lastID(r.frames):
			r.t.Errorf("event %d (%s) is in the log but the stream skipped it", ev.ID, ev.Type)
		case ok && string(b) != string(f.data):
			r.t.Errorf("event %d streamed as %s, logged as %s", ev.ID, f.data, b)
		}
	}
	for _, f := range r.frames {
		if !logged[f.id] && f.event != string(sandbox.TypeMessageUpdated) {
			r.t.Errorf("streamed %s %s is not in the log", f.event, f.id)
		}
	}
}

func lastID(fs []frame) uint64 {
	if len(fs) == 0 {
		return 0
	}
	id, _ := strconv.ParseUint(fs[len(fs)-1].id, 10, 64)
	return id
}

func frameTurn(f frame) string {
	var ev struct {
		TurnID *string `json:"turn_id"`
	}
	if json.Unmarshal(f.data, &ev) != nil || ev.TurnID == nil {
		return ""
	}
	return *ev.TurnID
}

// killStrays ends the processes that an agent of the test started and a
// killed server left behind: those whose working directory is under dir.
func killStrays(t *testing.T, dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// urlPort is the port of a test server's URL (http://127.0.0.1:PORT).
func urlPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in %q: %v", raw, err)
	}
	return u.Port()
}
