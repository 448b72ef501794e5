package fakemodel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The requests below are shaped as Gemini CLI 0.61 sends them (recorded
// from it, trimmed): the session context rides in the first user message
// next to the prompt, tool results come back as functionResponse parts,
// and the tools are declared with parametersJsonSchema.

const geminiWork = "/data/sandboxes/c_1/work"

var geminiSessionContext = "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n" +
	"My operating system is: linux\n- **Workspace Directories:**\n  - " + geminiWork +
	"\n- **Directory Structure:**\n\n" + geminiWork + "/\n\n</session_context>"

var geminiTools = []any{map[string]any{"functionDeclarations": []any{
	map[string]any{"name": "read_file", "parametersJsonSchema": map[string]any{
		"type": "object", "properties": map[string]any{"file_path": map[string]any{"type": "string"}}, "required": []string{"file_path"}}},
	map[string]any{"name": "write_file", "parametersJsonSchema": map[string]any{
		"type": "object", "properties": map[string]any{
			"file_path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}},
		"required": []string{"file_path", "content"}}},
	map[string]any{"name": "run_shell_command", "parametersJsonSchema": map[string]any{
		"type": "object", "properties": map[string]any{
			"command": map[string]any{"type": "string"}, "description": map[string]any{"type": "string"},
			"is_background": map[string]any{"type": "boolean"}},
		"required": []string{"command"}}},
}}}

func text(s string) map[string]any { return map[string]any{"text": s} }

func userMsg(parts ...map[string]any) map[string]any {
	return map[string]any{"role": "user", "parts": parts}
}

func modelMsg(parts ...map[string]any) map[string]any {
	return map[string]any{"role": "model", "parts": parts}
}

func callPart(id, name string) map[string]any {
	return map[string]any{"functionCall": map[string]any{"id": id, "name": name, "args": map[string]any{}},
		"thoughtSignature": "skip_thought_signature_validator"}
}

func resultPart(id, name string) map[string]any {
	return map[string]any{"functionResponse": map[string]any{"id": id, "name": name, "response": map[string]any{"output": "ok"}}}
}

// chat is a main-chat request body: system prompt, tools, contents.
func chat(contents ...map[string]any) map[string]any {
	return map[string]any{
		"contents":          contents,
		"systemInstruction": map[string]any{"role": "user", "parts": []any{text("You are Gemini CLI, an interactive CLI agent.")}},
		"tools":             geminiTools,
		"generationConfig":  map[string]any{"temperature": 1, "thinkingConfig": map[string]any{"includeThoughts": true}},
	}
}

func mustStart(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-goog-api-key", "test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// events reads an SSE stream as @google/genai does: one data line, then a
// blank line (the API ends them with \r\n\r\n).
func events(t *testing.T, r io.Reader) []geminiResponse {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []geminiResponse
	for _, ev := range strings.Split(string(b), "\r\n\r\n") {
		if ev == "" {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("event %q is not one data line", ev)
		}
		var resp geminiResponse
		if err := json.Unmarshal([]byte(data), &resp); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		out = append(out, resp)
	}
	return out
}

func TestGeminiConversation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contents []map[string]any
		want     Conversation
	}{
		{"FirstPrompt", []map[string]any{userMsg(text(geminiSessionContext), text("please write notes.txt"))},
			Conversation{Prompt: "please write notes.txt"}},
		{"AfterToolResult", []map[string]any{
			userMsg(text(geminiSessionContext), text("please write notes.txt")),
			modelMsg(text(BeforeText("notes.txt")), callPart("fakecall_1", "write_file")),
			userMsg(resultPart("fakecall_1", "write_file")),
		}, Conversation{Prompt: "please write notes.txt", ToolResults: 1}},
		{"NextTurn", []map[string]any{
			userMsg(text(geminiSessionContext), text("please write notes.txt")),
			modelMsg(text(BeforeText("notes.txt")), callPart("fakecall_1", "write_file")),
			userMsg(resultPart("fakecall_1", "write_file")),
			modelMsg(text(AfterText("notes.txt"))),
			userMsg(text("please shell ran.txt")),
		}, Conversation{Prompt: "please shell ran.txt"}},
		{"ContextAlone", []map[string]any{userMsg(text(geminiSessionContext)), userMsg(text("hello"))},
			Conversation{Prompt: "hello"}},
		{"ThoughtsSkipped", []map[string]any{userMsg(map[string]any{"text": "private", "thought": true}, text("hi"))},
			Conversation{Prompt: "hi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(chat(tc.contents...))
			var req geminiRequest
			if err := json.Unmarshal(b, &req); err != nil {
				t.Fatal(err)
			}
			if got := req.conversation(); got != tc.want {
				t.Fatalf("conversation = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGeminiTurn(t *testing.T) {
	const stream = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
	first := func(prompt string) map[string]any {
		return chat(userMsg(text(geminiSessionContext), text(prompt)))
	}
	for _, tc := range []struct {
		name     string
		body     map[string]any
		text     string
		call     string         // the function called, "" for none
		wantArgs map[string]any // the call's arguments
	}{
		{"Write", first("please write notes.txt"), BeforeText("notes.txt"), "write_file",
			map[string]any{"file_path": geminiWork + "/notes.txt", "content": WriteContent}},
		{"Shell", first("please shell ran.txt"), BeforeText("ran.txt"), "run_shell_command",
			map[string]any{"command": ShellCommand("ran.txt"), "description": "Write ran.txt"}},
		{"AfterWrite", chat(
			userMsg(text(geminiSessionContext), text("please write notes.txt")),
			modelMsg(text(BeforeText("notes.txt")), callPart("fakecall_1", "write_file")),
			userMsg(resultPart("fakecall_1", "write_file")),
		), AfterText("notes.txt"), "", nil},
		{"Plain", first("hello"), PlainText, "", nil},
		{"WriteUndeclared", map[string]any{
			"contents": []any{userMsg(text("please write notes.txt"))},
			"tools": []any{map[string]any{"functionDeclarations": []any{
				map[string]any{"name": "read_file", "parametersJsonSchema": map[string]any{"type": "object"}}}}},
		}, BeforeText("notes.txt") + " The write tool is not declared.", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Script
			srv := mustStart(t, Gemini(&s))
			resp := post(t, context.Background(), srv.URL+stream, tc.body)
			if got, want := resp.StatusCode, http.StatusOK; got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
			if got := resp.Header.Get("Content-Type"); got != "text/event-stream" {
				t.Fatalf("Content-Type %q", got)
			}
			evs := events(t, resp.Body)
			var texts []string
			var calls []*geminiFunctionCall
			for i, ev := range evs {
				if len(ev.Candidates) != 1 || ev.UsageMetadata == nil {
					t.Fatalf("event %d: %+v", i, ev)
				}
				c := ev.Candidates[0]
				if got, want := c.FinishReason != "", i == len(evs)-1; got != want {
					t.Fatalf("event %d of %d has finishReason %q", i, len(evs), c.FinishReason)
				}
				for _, p := range c.Content.Parts {
					if p.Text != "" {
						texts = append(texts, p.Text)
					}
					if p.FunctionCall != nil {
						calls = append(calls, p.FunctionCall)
					}
				}
			}
			if got, want := evs[len(evs)-1].Candidates[0].FinishReason, "STOP"; got != want {
				t.Fatalf("finishReason %q, want %q", got, want)
			}
			if got := strings.Join(texts, ""); got != tc.text {
				t.Fatalf("text %q, want %q", got, tc.text)
			}
			if len(texts) < 2 {
				t.Fatalf("text came in %d chunks, want it streamed", len(texts))
			}
			if tc.call == "" {
				if len(calls) != 0 {
					t.Fatalf("calls %+v, want none", calls)
				}
			} else {
				if len(calls) != 1 {
					t.Fatalf("%d calls, want 1", len(calls))
				}
				c := calls[0]
				if c.Name != tc.call || !strings.HasPrefix(c.ID, ToolIDPrefix) {
					t.Fatalf("call %s id %q, want %s with an id starting %q", c.Name, c.ID, tc.call, ToolIDPrefix)
				}
				got, _ := json.Marshal(c.Args)
				want, _ := json.Marshal(tc.wantArgs)
				if string(got) != string(want) {
					t.Fatalf("args %s, want %s", got, want)
				}
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Side || reqs[0].API != "gemini" || reqs[0].Path != "/v1beta/models/gemini-2.5-pro:streamGenerateContent" {
				t.Fatalf("recorded %+v", reqs)
			}
		})
	}
}

func TestGeminiFail(t *testing.T) {
	var s Script
	srv := mustStart(t, Gemini(&s))
	resp := post(t, context.Background(), srv.URL+"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
		chat(userMsg(text(geminiSessionContext), text("please fail"))))
	if got, want := resp.StatusCode, http.StatusBadRequest; got != want {
		t.Fatalf("status %d, want %d", got, want)
	}
	// The SDK reads the body as JSON only when the content type says so.
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "application/json") {
		t.Fatalf("Content-Type %q", got)
	}
	var body struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != 400 || body.Error.Message != FailText || body.Error.Status != "INVALID_ARGUMENT" {
		t.Fatalf("error body %+v", body.Error)
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Conv.Prompt != "please fail" {
		t.Fatalf("recorded %+v", reqs)
	}
}

// slowServer is the fake with a Slow reply's pacing and bound shortened,
// and a signal when its handler has returned.
func slowServer(t *testing.T, slowFor time.Duration) (url string, done <-chan struct{}) {
	t.Helper()
	h := &geminiServer{script: &Script{}, slowInterval: time.Millisecond, slowFor: slowFor}
	returned := make(chan struct{})
	srv := mustStart(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		h.ServeHTTP(w, r)
	}))
	return srv.URL + "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", returned
}

func TestGeminiSlow(t *testing.T) {
	t.Run("UntilTheClientGoes", func(t *testing.T) {
		url, done := slowServer(t, time.Hour)
		ctx, cancel := context.WithCancel(context.Background())
		resp := post(t, ctx, url, chat(userMsg(text(geminiSessionContext), text("slow"))))
		r := bufio.NewReader(resp.Body)
		for n := 0; n < 3; {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, "data: ") {
				if !strings.Contains(line, `"text":"`+SlowChunk+`"`) {
					t.Fatalf("event %q, want %q", line, SlowChunk)
				}
				n++
			}
		}
		cancel()
		<-done // the handler stops streaming once the client is gone
	})
	t.Run("Bounded", func(t *testing.T) {
		url, done := slowServer(t, 20*time.Millisecond)
		resp := post(t, context.Background(), url, chat(userMsg(text("slow"))))
		evs := events(t, resp.Body)
		<-done
		if got := evs[len(evs)-1].Candidates[0].FinishReason; got != "STOP" {
			t.Fatalf("last event finishReason %q, want STOP", got)
		}
	})
}

func TestGeminiSide(t *testing.T) {
	nextSpeaker := map[string]any{"type": "object", "properties": map[string]any{
		"reasoning":    map[string]any{"type": "string"},
		"next_speaker": map[string]any{"type": "string", "enum": []string{"user", "model"}},
	}, "required": []string{"reasoning", "next_speaker"}}
	classifier := map[string]any{"type": "OBJECT", "properties": map[string]any{
		"complexity_reasoning": map[string]any{"type": "STRING"},
		"complexity_score":     map[string]any{"type": "INTEGER", "minimum": 1},
	}, "required": []string{"complexity_reasoning", "complexity_score"}}
	jsonCall := func(schema any) map[string]any {
		return map[string]any{
			"contents":         []any{userMsg(text(geminiSessionContext)), userMsg(text("please write notes.txt"))},
			"generationConfig": map[string]any{"responseMimeType": "application/json", "responseJsonSchema": schema},
		}
	}
	for _, tc := range []struct {
		name   string
		path   string
		body   map[string]any
		status int
		want   string // the text answered; with part, a piece of the body
		part   bool
	}{
		{"NextSpeaker", "/v1beta/models/gemini-2.5-flash:generateContent", jsonCall(nextSpeaker), 200,
			`{"next_speaker":"user","reasoning":""}`, false},
		{"Classifier", "/v1beta/models/gemini-3.5-flash-lite:generateContent", jsonCall(classifier), 200,
			`{"complexity_reasoning":"","complexity_score":1}`, false},
		{"Summary", "/v1beta/models/gemini-2.5-flash:generateContent",
			map[string]any{"contents": []any{userMsg(text("Summarize this conversation."))}}, 200, PlainText, false},
		{"UntooledStream", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
			map[string]any{"contents": []any{userMsg(text("please write notes.txt"))}}, 200, PlainText, false},
		{"CountTokens", "/v1beta/models/gemini-2.5-pro:countTokens",
			map[string]any{"contents": []any{userMsg(text("hello"))}}, 200, `"totalTokens":`, true},
		{"ErrUnknownMethod", "/v1beta/models/gemini-2.5-pro:embedContent", map[string]any{}, 404, `"status":"NOT_FOUND"`, true},
		{"ErrUnknownPath", "/v1beta/files", map[string]any{}, 404, `"status":"NOT_FOUND"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Script
			srv := mustStart(t, Gemini(&s))
			resp := post(t, context.Background(), srv.URL+tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			var got string
			switch {
			case strings.Contains(tc.path, "alt=sse"):
				evs := events(t, resp.Body)
				got = evs[0].Candidates[0].Content.Parts[0].Text
			case strings.HasSuffix(tc.path, ":generateContent"):
				var r geminiResponse
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
					t.Fatal(err)
				}
				if r.Candidates[0].FinishReason != "STOP" {
					t.Fatalf("finishReason %q", r.Candidates[0].FinishReason)
				}
				got = r.Candidates[0].Content.Parts[0].Text
			default:
				b, _ := io.ReadAll(resp.Body)
				got = string(b)
			}
			if tc.part && !strings.Contains(got, tc.want) || !tc.part && got != tc.want {
				t.Fatalf("answer %q, want %q", got, tc.want)
			}
			reqs := s.Requests()
			if len(reqs) != 1 || !reqs[0].Side || reqs[0].Conv != (Conversation{}) {
				t.Fatalf("recorded %+v, want one side request", reqs)
			}
		})
	}
}
