package agent

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func init() { fakeAgents["loader"] = fakeLoader }

// fakeLoader is an agent whose session/load behaves as SPARKLES_FAKE_LOAD
// says: "replay" replays three chunks, answers, then sends one update more;
// "refuse" answers -32603 as Gemini CLI 0.61 does for a session made in the
// same clock minute; "unsupported" does not advertise loadSession. Its
// prompt answers with an update listing every method it received.
func fakeLoader() int {
	mode := os.Getenv("SPARKLES_FAKE_LOAD")
	f := newFakePeer()
	var got []string
	for {
		m := f.read()
		if m.Method == "" {
			continue
		}
		got = append(got, m.Method)
		switch m.Method {
		case "initialize":
			f.answer(m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": mode != "unsupported"}})
		case "session/new":
			f.answer(m.ID, map[string]any{"sessionId": "s-new"})
		case "session/load":
			switch mode {
			case "replay":
				for _, s := range []string{"earlier ", "conversation ", "replayed"} {
					f.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": s}})
				}
				f.answer(m.ID, nil)
				f.update(map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": []any{}})
			default:
				f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32603, "message": "No previous sessions found for this project."}})
			}
		case "session/prompt":
			f.update(map[string]any{"sessionUpdate": "methods", "got": got})
			f.answer(m.ID, map[string]any{"stopReason": "end_turn"})
		}
	}
}

// methodsSeen runs a prompt and returns the methods the fake loader received.
func methodsSeen(t *testing.T, c *Conn) ([]string, []Inbound) {
	t.Helper()
	if err := c.Prompt("turn_1", "hi"); err != nil {
		t.Fatal(err)
	}
	ins := until(t, c, PromptDone)
	for _, in := range ins {
		if in.Kind == Update {
			if u := parseUpdate(t, in).Update; u.SessionUpdate == "methods" {
				return u.Got, ins
			}
		}
	}
	t.Fatalf("no methods update in %q", summary(t, ins))
	return nil, nil
}

func TestLoadSession(t *testing.T) {
	withLoad := func(mode, session string) func(*Config) {
		return func(c *Config) {
			c.Env = append(c.Env, "SPARKLES_FAKE_LOAD="+mode)
			c.Session = session
		}
	}
	t.Run("OK", func(t *testing.T) {
		c := MustStart(t, "loader", t.TempDir(), withLoad("replay", "s-earlier"))
		r := c.Resume()
		if !r.Supported || !r.Loaded || r.Err != nil || r.Asked != "s-earlier" || r.Replayed != 3 {
			t.Fatalf("resume = %+v, want loaded with 3 replayed", r)
		}
		if got, want := c.SessionID(), "s-earlier"; got != want {
			t.Fatalf("session %q, want %q", got, want)
		}
		got, ins := methodsSeen(t, c)
		if want := []string{"initialize", "session/load", "session/prompt"}; !slices.Equal(got, want) {
			t.Fatalf("the agent got %q, want %q", got, want)
		}
		// The replay is history: none of it reaches the inbox. What the
		// agent sends after its answer does.
		if s := strings.Join(summary(t, ins), " "); strings.Contains(s, "agent_message_chunk") || !strings.HasPrefix(s, "available_commands_update") {
			t.Fatalf("inbox after the load: %s", s)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		c := MustStart(t, "loader", t.TempDir(), withLoad("refuse", "s-earlier"))
		r := c.Resume()
		var rpcErr *RPCError
		if r.Loaded || !errors.As(r.Err, &rpcErr) || rpcErr.Code != -32603 {
			t.Fatalf("resume = %+v, want the -32603 refusal", r)
		}
		if got, want := c.SessionID(), "s-new"; got != want {
			t.Fatalf("session %q, want the new one %q", got, want)
		}
		if got, _ := methodsSeen(t, c); !slices.Equal(got, []string{"initialize", "session/load", "session/new", "session/prompt"}) {
			t.Fatalf("the agent got %q", got)
		}
	})
	t.Run("Unsupported", func(t *testing.T) {
		// ACP: a client must not call session/load unless it is advertised.
		c := MustStart(t, "loader", t.TempDir(), withLoad("unsupported", "s-earlier"))
		if r := c.Resume(); r.Supported || r.Loaded || r.Err != nil {
			t.Fatalf("resume = %+v, want nothing tried", r)
		}
		if got, _ := methodsSeen(t, c); !slices.Equal(got, []string{"initialize", "session/new", "session/prompt"}) {
			t.Fatalf("the agent got %q", got)
		}
	})
	t.Run("NoneAsked", func(t *testing.T) {
		c := MustStart(t, "loader", t.TempDir(), withLoad("replay", ""))
		if got, _ := methodsSeen(t, c); !slices.Equal(got, []string{"initialize", "session/new", "session/prompt"}) {
			t.Fatalf("the agent got %q", got)
		}
	})
	t.Run("Demo", func(t *testing.T) {
		// The demo agent keeps its sessions in its directory: a second
		// process loads the first one's session and remembers its turn.
		dir := t.TempDir()
		writeFile(t, dir, "README.md", "# Hello\n")
		first := MustStart(t, "demo", dir)
		if err := first.Prompt("turn_1", "the first question"); err != nil {
			t.Fatal(err)
		}
		until(t, first, PromptDone)
		id := first.SessionID()
		first.Close()

		second := MustStart(t, "demo", dir, func(c *Config) { c.Session = id })
		if r := second.Resume(); !r.Loaded || r.Replayed != 2 || second.SessionID() != id {
			t.Fatalf("resume = %+v in session %q, want %q loaded with its prompt and reply replayed", r, second.SessionID(), id)
		}
		if err := second.Prompt("turn_2", "recall"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, second, PromptDone)
		text := messageText(t, ins)
		if !strings.Contains(text, `Before that you asked: "the first question".`) {
			t.Fatalf("the demo forgot the first turn: %q", text)
		}
		if strings.Contains(text, `You asked: "the first question"`) {
			t.Fatalf("the replayed reply reached the inbox: %q", text)
		}

		// A session the demo never made is refused, and a new one opens.
		third := MustStart(t, "demo", dir, func(c *Config) { c.Session = "demo-session-00000000000000ff" })
		if r := third.Resume(); r.Loaded || r.Err == nil || third.SessionID() == id {
			t.Fatalf("resume = %+v, want refused and a new session", r)
		}
	})
}
