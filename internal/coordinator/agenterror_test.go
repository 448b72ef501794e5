package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// scriptAgent is a builtin agent that boots as told and answers its prompts
// in turn with the answers given: {"result": …} or {"error": …}, the last
// one repeating. "{cwd}" in an answer becomes the session's directory.
type scriptAgent struct {
	authMethods []map[string]any // offered in the answer to initialize
	newSession  map[string]any   // an error to refuse session/new with; nil opens a session
	prompts     []map[string]any
}

func (a *scriptAgent) run(_ context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
	in := bufio.NewReader(stdin)
	send := func(v map[string]any, cwd string) {
		b, _ := json.Marshal(v)
		if cwd != "" {
			esc, _ := json.Marshal(cwd)
			b = []byte(strings.ReplaceAll(string(b), "{cwd}", strings.Trim(string(esc), `"`)))
		}
		stdout.Write(append(b, '\n'))
	}
	cwd, n := "", 0
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return nil
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Cwd string `json:"cwd"`
			} `json:"params"`
		}
		json.Unmarshal(line, &m)
		answer := map[string]any{"jsonrpc": "2.0", "id": m.ID}
		switch m.Method {
		case "initialize":
			answer["result"] = map[string]any{"protocolVersion": 1, "authMethods": a.authMethods}
		case "session/new":
			cwd = m.Params.Cwd
			if a.newSession != nil {
				answer["error"] = a.newSession
			} else {
				answer["result"] = map[string]any{"sessionId": "s1"}
			}
		case "session/prompt":
			for k, v := range a.prompts[min(n, len(a.prompts)-1)] {
				answer[k] = v
			}
			n++
		default:
			continue
		}
		send(answer, cwd)
	}
}

func newScriptEnv(t *testing.T, a *scriptAgent, log io.Writer) *env {
	t.Helper()
	return newEnv(t, func(c *coordinator.Config) {
		c.Builtins = map[string]coordinator.BuiltinAgent{"script": a.run}
		if log != nil {
			c.Logger = slog.New(slog.NewJSONHandler(log, nil))
		}
	})
}

// turnOf runs one turn on sb and returns its events.
func (e *env) turnOf(sb sandbox.Sandbox, input string) []sandbox.Event {
	e.t.Helper()
	turn, err := e.co.StartTurn(context.Background(), sb.ID, input)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []sandbox.Event
	for _, ev := range e.waitFor(sb.ID, 0, turnCompleted(turn.ID)) {
		if ev.TurnID == turn.ID {
			out = append(out, ev)
		}
	}
	return out
}

// TestAgentError has the agent answer its prompt with a well-formed JSON-RPC
// error, as agents do when their model API refuses a request.
func TestAgentError(t *testing.T) {
	const secret = "hunter2-very-secret"
	t.Run("OK", func(t *testing.T) {
		var log syncbuf.Buffer
		a := &scriptAgent{prompts: []map[string]any{
			{"error": map[string]any{"code": -32603, "message": "Internal error", "data": map[string]any{
				"details": "API Error: 400 prompt is too long; key " + secret + "\nread {cwd}/src/main.go and /home/alice/.claude/settings.json; run /login",
			}}},
			{"result": map[string]any{"stopReason": "end_turn"}},
		}}
		e := newScriptEnv(t, a, &log)
		sb := e.create(sandbox.CreateParams{Agent: "script", Secrets: map[string]string{"KEY": secret}})
		e.waitStatus(sb.ID, sandbox.StatusReady)
		evs := e.turnOf(sb, "hello")
		wantFailed(t, evs, sandbox.ErrAgent, sandbox.ErrAgent)
		msg := sandboxError(evs).Message
		const want = "Internal error: API Error: 400 prompt is too long; key [REDACTED] read src/main.go and [path]; run /login"
		if msg != want {
			t.Fatalf("sandbox.error message %q, want %q", msg, want)
		}
		if got := completed(evs).Error.Message; got != msg {
			t.Fatalf("turn.completed error %q, want the sandbox.error's %q", got, msg)
		}
		// The server log keeps the whole answer, for the operator.
		logged := log.String()
		if !strings.Contains(logged, `"sandbox_id":"`+sb.ID+`"`) || !strings.Contains(logged, "/home/alice/.claude/settings.json") ||
			!strings.Contains(logged, `"level":"WARN","msg":"agent answered the prompt with an error"`) {
			t.Fatalf("the log does not hold the agent's answer with the sandbox id:\n%s", logged)
		}
		// The agent is fine: the next turn runs.
		if c := completed(e.turnOf(sb, "again")); c.Status != sandbox.TurnSucceeded {
			t.Fatalf("next turn = %+v", c)
		}
	})
	for _, tc := range []struct {
		name string
		err  map[string]any
		want string
	}{
		{"OKDataString", map[string]any{"code": -32603, "message": "Internal error", "data": "stream disconnected before completion"},
			"Internal error: stream disconnected before completion"},
		{"OKDataAPIError", map[string]any{"code": -32603, "message": "Internal error", "data": map[string]any{
			"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "max_tokens: 999999 > 64000"}}},
			"Internal error: max_tokens: 999999 > 64000"},
		{"OKMessageOnly", map[string]any{"code": -32603, "message": "Internal error: This model is overloaded"},
			"Internal error: This model is overloaded"},
		{"OKDataRepeatsMessage", map[string]any{"code": 1, "message": "quota exceeded", "data": "quota exceeded"},
			"quota exceeded"},
		{"OKAuthRequired", map[string]any{"code": -32000, "message": "Authentication required"},
			"Authentication required; the agent needs credentials (it offers: claude-login); give it its key in the sandbox's secrets, see docs/agents.md"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &scriptAgent{
				authMethods: []map[string]any{{"id": "claude-login", "name": "Log in with Claude Code"}},
				prompts:     []map[string]any{{"error": tc.err}},
			}
			e := newScriptEnv(t, a, nil)
			sb := e.create(sandbox.CreateParams{Agent: "script"})
			evs := e.turnOf(sb, "hello")
			wantFailed(t, evs, sandbox.ErrAgent, sandbox.ErrAgent)
			if got := sandboxError(evs).Message; got != tc.want {
				t.Fatalf("message %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("OKLong", func(t *testing.T) {
		a := &scriptAgent{prompts: []map[string]any{
			{"error": map[string]any{"code": -32603, "message": strings.Repeat("é", 400) + " " + secret}},
		}}
		e := newScriptEnv(t, a, nil)
		sb := e.create(sandbox.CreateParams{Agent: "script", Secrets: map[string]string{"KEY": secret}})
		evs := e.turnOf(sb, "hello")
		wantFailed(t, evs, sandbox.ErrAgent, sandbox.ErrAgent)
		msg := sandboxError(evs).Message
		if len(msg) > 500 || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "é…") {
			t.Fatalf("message of %d bytes %q, want at most 500, cut on a rune and marked", len(msg), msg)
		}
	})
	t.Run("ErrNoStopReason", func(t *testing.T) {
		// A result without a stop reason is malformed, not the agent's error.
		a := &scriptAgent{prompts: []map[string]any{{"result": map[string]any{}}}}
		e := newScriptEnv(t, a, nil)
		sb := e.create(sandbox.CreateParams{Agent: "script"})
		c := completed(e.turnOf(sb, "hello"))
		if c.Status != sandbox.TurnFailed || c.Error == nil || c.Error.Code != sandbox.ErrProtocol {
			t.Fatalf("turn.completed = %+v, want failed with %s", c, sandbox.ErrProtocol)
		}
	})
}

// TestAuthRequired boots an agent that will not open a session without
// credentials, as Gemini CLI does without its key: the sandbox says what the
// agent wants instead of only that it refused.
func TestAuthRequired(t *testing.T) {
	gemini := []map[string]any{
		{"id": "oauth-personal", "name": "Log in with Google", "description": "Log in with your Google account"},
		{"id": "gemini-api-key", "name": "Gemini API key", "_meta": map[string]any{"api-key": map[string]any{"provider": "google"}}},
		{"id": "a path /etc/x", "name": "not an id"},
		{"name": "no id"},
	}
	for _, tc := range []struct {
		name    string
		methods []map[string]any
		refusal map[string]any
		want    string
	}{
		{"OK", gemini, map[string]any{"code": -32000, "message": "Gemini API key is missing or not configured."},
			"the agent could not start: the agent needs credentials (it offers: oauth-personal, gemini-api-key); give it its key in the sandbox's secrets, see docs/agents.md"},
		{"OKNoMethods", nil, map[string]any{"code": -32000, "message": "Authentication required"},
			"the agent could not start: the agent needs credentials; give it its key in the sandbox's secrets, see docs/agents.md"},
		{"OKOtherRefusal", gemini, map[string]any{"code": -32603, "message": "Internal error"},
			"the agent could not start: the agent refused to open a session and may lack credentials (it offers: oauth-personal, gemini-api-key); give it its key in the sandbox's secrets, see docs/agents.md"},
		{"OKPlainRefusal", nil, map[string]any{"code": -32603, "message": "Internal error"},
			"the agent could not start: agent refused to open a session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newScriptEnv(t, &scriptAgent{authMethods: tc.methods, newSession: tc.refusal}, nil)
			sb := e.create(sandbox.CreateParams{Agent: "script"})
			got := e.waitStatus(sb.ID, sandbox.StatusFailed)
			if got.StatusDetail != tc.want {
				t.Fatalf("status_detail %q, want %q", got.StatusDetail, tc.want)
			}
			evs := e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxError))
			if d := sandboxError(evs); d.Code != sandbox.ErrAgentStartFailed || d.Message != tc.want {
				t.Fatalf("sandbox.error = %+v, want %s %q", d, sandbox.ErrAgentStartFailed, tc.want)
			}
		})
	}
}
