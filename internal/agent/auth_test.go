package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// bootAgent answers initialize with init and session/new with newSession
// ({"result": …} or {"error": …}), then its prompts with prompt.
func bootAgent(init any, newSession, prompt map[string]any) func(context.Context, io.Reader, io.Writer, []string) error {
	return func(_ context.Context, stdin io.Reader, stdout io.Writer, _ []string) error {
		in := bufio.NewReader(stdin)
		for {
			line, err := in.ReadBytes('\n')
			if err != nil {
				return nil
			}
			var m message
			json.Unmarshal(line, &m)
			answer := map[string]any{"jsonrpc": "2.0", "id": m.ID}
			switch m.Method {
			case "initialize":
				answer["result"] = init
			case "session/new":
				for k, v := range newSession {
					answer[k] = v
				}
			case "session/prompt":
				for k, v := range prompt {
					answer[k] = v
				}
			default:
				continue
			}
			b, _ := json.Marshal(answer)
			stdout.Write(append(b, '\n'))
		}
	}
}

func TestAuthMethods(t *testing.T) {
	opened := map[string]any{"result": map[string]any{"sessionId": "s1"}}
	start := func(t *testing.T, init any, newSession map[string]any) (*Conn, error) {
		t.Helper()
		c, err := Start(context.Background(), Config{Dir: t.TempDir(), Run: bootAgent(init, newSession, nil)})
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	t.Run("OK", func(t *testing.T) {
		c, err := start(t, map[string]any{"protocolVersion": 1, "authMethods": []any{
			map[string]any{"id": "gemini-api-key", "name": "Gemini API key"},
			map[string]any{"id": "oauth-personal", "name": "Log in with Google", "type": "terminal", "args": []string{"--login"}},
			map[string]any{"id": "not an id; /etc/passwd", "name": "skipped"},
			"not a method",
		}}, opened)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := offers(c.AuthMethods()), " (it offers: gemini-api-key, oauth-personal)"; got != want {
			t.Fatalf("methods%s, want%s", got, want)
		}
	})
	t.Run("OKMalformedList", func(t *testing.T) {
		// ACP lets a boot go on whatever shape authMethods has.
		c, err := start(t, map[string]any{"protocolVersion": 1, "authMethods": map[string]any{"id": "x"}}, opened)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.AuthMethods(); len(got) != 0 {
			t.Fatalf("methods %v, want none", got)
		}
	})
	t.Run("ErrAuthRequired", func(t *testing.T) {
		_, err := start(t, map[string]any{"protocolVersion": 1, "authMethods": []any{map[string]any{"id": "gemini-api-key", "name": "Gemini API key"}}},
			map[string]any{"error": map[string]any{"code": -32000, "message": "Gemini API key is missing or not configured."}})
		var ae *AuthError
		if !errors.As(err, &ae) || len(ae.Methods) != 1 || ae.Err.Code != CodeAuthRequired {
			t.Fatalf("err = %#v, want an *AuthError with the method offered", err)
		}
		if got, want := err.Error(), "the agent needs credentials (it offers: gemini-api-key); give it its key in the sandbox's secrets, see docs/agents.md"; got != want {
			t.Fatalf("err %q, want %q", got, want)
		}
	})
	t.Run("ErrRefused", func(t *testing.T) {
		_, err := start(t, map[string]any{"protocolVersion": 1},
			map[string]any{"error": map[string]any{"code": -32603, "message": "Internal error"}})
		if got, want := errString(err), "agent refused to open a session"; got != want {
			t.Fatalf("err %q, want %q", got, want)
		}
	})
}

func TestPromptError(t *testing.T) {
	// The error's data carries the cause as often as its message does.
	c := MustStart(t, "", t.TempDir(), func(cfg *Config) {
		cfg.Command = nil
		cfg.Run = bootAgent(map[string]any{"protocolVersion": 1}, map[string]any{"result": map[string]any{"sessionId": "s1"}},
			map[string]any{"error": map[string]any{"code": -32603, "message": "Internal error", "data": map[string]any{"details": "API Error: 400"}}})
	})
	if err := c.Prompt("turn_1", "go"); err != nil {
		t.Fatal(err)
	}
	in := until(t, c, PromptDone)[0]
	var rpcErr *RPCError
	if !errors.As(in.Err, &rpcErr) || rpcErr.Code != -32603 || string(rpcErr.Data) != `{"details":"API Error: 400"}` {
		t.Fatalf("PromptDone.Err = %#v, want the agent's error with its data", in.Err)
	}
}

// TestPromptUsage: the usage of a prompt answer is ACP's usage, or, from
// Gemini CLI, which reports a turn's tokens nowhere else, the two counts of
// _meta.quota.token_count; nothing else of _meta is taken.
func TestPromptUsage(t *testing.T) {
	for _, tt := range []struct {
		name   string
		result map[string]any
		want   string
	}{
		{"ACP", map[string]any{"stopReason": "end_turn", "usage": map[string]any{"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}}, `{"inputTokens":3,"outputTokens":4,"totalTokens":7}`},
		{"GeminiQuota", map[string]any{"stopReason": "end_turn", "_meta": map[string]any{"quota": map[string]any{"token_count": map[string]any{"input_tokens": 120, "output_tokens": 30}, "model_usage": []any{"x"}}}}, `{"inputTokens":120,"outputTokens":30}`},
		{"ACPWinsOverQuota", map[string]any{"stopReason": "end_turn", "usage": map[string]any{"inputTokens": 1}, "_meta": map[string]any{"quota": map[string]any{"token_count": map[string]any{"input_tokens": 120}}}}, `{"inputTokens":1}`},
		{"None", map[string]any{"stopReason": "end_turn", "_meta": map[string]any{"other": 1}}, ``},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := MustStart(t, "", t.TempDir(), func(cfg *Config) {
				cfg.Command = nil
				cfg.Run = bootAgent(map[string]any{"protocolVersion": 1}, map[string]any{"result": map[string]any{"sessionId": "s1"}}, map[string]any{"result": tt.result})
			})
			if err := c.Prompt("turn_1", "go"); err != nil {
				t.Fatal(err)
			}
			in := until(t, c, PromptDone)[0]
			if got := string(in.Usage); got != tt.want {
				t.Fatalf("usage %s, want %s", got, tt.want)
			}
		})
	}
}
