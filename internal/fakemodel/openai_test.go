package fakemodel

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// The requests below have the shape Codex 0.137 (codex-acp 0.16.0) sends for
// gpt-5.4-mini in its read-only mode, cut to what the fake reads plus enough
// of the rest to show it is ignored: a developer message with the sandbox
// rules, the environment context as a user message, the user's prompt, and
// then the model's tool calls with their results.

// codexTools is the tool list of such a request: exec_command and
// write_stdin (Codex's unified exec), apply_patch as a freeform (custom)
// tool, and tools the fake never calls.
const codexTools = `[
	{"type":"function","name":"exec_command","description":"Run a command.","strict":false,
	 "parameters":{"type":"object","properties":{"cmd":{"type":"string"},"workdir":{"type":"string"},
	   "sandbox_permissions":{"type":"string","enum":["use_default","require_escalated"]},
	   "justification":{"type":"string"}},"required":["cmd"],"additionalProperties":false}},
	{"type":"function","name":"write_stdin","description":"Write to a running command.","strict":false,
	 "parameters":{"type":"object","properties":{"session_id":{"type":"number"},"chars":{"type":"string"}},"required":["session_id"]}},
	{"type":"function","name":"update_plan","description":"Update the plan.","strict":false,
	 "parameters":{"type":"object","properties":{"plan":{"type":"array"}},"required":["plan"]}},
	{"type":"custom","name":"apply_patch","description":"Edit files with a patch.",
	 "format":{"type":"grammar","syntax":"lark","definition":"start: begin_patch hunk+ end_patch"}},
	{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents.","tools":[]},
	{"type":"web_search","external_web_access":false}
]`

// codexOlderTools is the list Codex gives models of other shell types: a
// shell_command function, and apply_patch as a JSON function.
const codexOlderTools = `[
	{"type":"function","name":"shell_command","strict":false,
	 "parameters":{"type":"object","properties":{"command":{"type":"string"},"workdir":{"type":"string"}},"required":["command"]}},
	{"type":"function","name":"apply_patch","strict":false,
	 "parameters":{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}}
]`

// codexShellTools is the oldest shape: a "shell" function taking an argv.
const codexShellTools = `[
	{"type":"function","name":"shell","strict":false,
	 "parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"workdir":{"type":"string"}},"required":["command"]}}
]`

const codexCwd = "/srv/sandboxes/c_1/work"

func codexItem(fields map[string]any) string {
	b, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func codexMessage(role string, texts ...string) string {
	kind := "input_text"
	if role == "assistant" {
		kind = "output_text"
	}
	var parts []any
	for _, t := range texts {
		parts = append(parts, map[string]any{"type": kind, "text": t})
	}
	return codexItem(map[string]any{"type": "message", "role": role, "content": parts})
}

var (
	codexPermissionsItem = codexMessage("developer", "<permissions instructions>\nFilesystem sandboxing: `sandbox_mode` is `read-only`.\n</permissions instructions>")
	codexEnvironmentItem = codexMessage("user", "<environment_context>\n  <cwd>"+codexCwd+"</cwd>\n  <shell>bash</shell>\n</environment_context>")
	codexAbortedItem     = codexMessage("user", "<turn_aborted>\nThe user interrupted the previous turn on purpose.\n</turn_aborted>")
	codexAgentsItem      = codexMessage("user", "<recommended_plugins>\nnone\n</recommended_plugins>", "# AGENTS.md instructions for "+codexCwd+"\n\n<INSTRUCTIONS>\nBe brief.\n</INSTRUCTIONS>")
)

func codexCustomCall(id, input string) string {
	return codexItem(map[string]any{"type": "custom_tool_call", "status": "completed", "call_id": id, "name": "apply_patch", "input": input})
}

func codexCustomOutput(id, output string) string {
	return codexItem(map[string]any{"type": "custom_tool_call_output", "call_id": id, "output": output})
}

func codexFunctionCall(id, name, args string) string {
	return codexItem(map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": args})
}

func codexFunctionOutput(id, output string) string {
	return codexItem(map[string]any{"type": "function_call_output", "call_id": id, "output": output})
}

// codexRequest is a whole request body as Codex sends it.
func codexRequest(tools string, items ...string) string {
	return `{"model":"gpt-5.4-mini","instructions":"You are a coding agent.","input":[` + strings.Join(items, ",") +
		`],"tools":` + tools + `,"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"effort":"medium"},` +
		`"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"thread-1",` +
		`"text":{"verbosity":"medium"},"client_metadata":{"x-codex-installation-id":"install-1"}}`
}

// openaiAnswer is a streamed answer as Codex reads it.
type openaiAnswer struct {
	text      string           // the output_text deltas, joined
	items     []map[string]any // the output_item.done items, in order
	completed map[string]any   // the response of response.completed
}

// readOpenAIStream parses an SSE answer and checks what Codex relies on:
// each event's name is its data's type, sequence numbers grow, a message's
// deltas add up to its final text, and the stream ends with
// response.completed.
func readOpenAIStream(t *testing.T, body io.Reader) openaiAnswer {
	t.Helper()
	var a openaiAnswer
	var event string
	seq := -1
	deltas := map[string]string{}
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("data of %s: %v", event, err)
			}
			if ev["type"] != event {
				t.Errorf("event %s carries type %v", event, ev["type"])
			}
			if n := int(ev["sequence_number"].(float64)); n <= seq {
				t.Errorf("sequence number %d after %d", n, seq)
			} else {
				seq = n
			}
			if a.completed != nil {
				t.Errorf("%s after response.completed", event)
			}
			switch event {
			case "response.output_text.delta":
				a.text += ev["delta"].(string)
				deltas[ev["item_id"].(string)] += ev["delta"].(string)
			case "response.output_item.done":
				item := ev["item"].(map[string]any)
				a.items = append(a.items, item)
				if item["type"] == "message" {
					part := item["content"].([]any)[0].(map[string]any)
					if got, want := part["text"], deltas[item["id"].(string)]; got != want {
						t.Errorf("message %v ends as %q, its deltas said %q", item["id"], got, want)
					}
				}
			case "response.completed":
				a.completed = ev["response"].(map[string]any)
			}
		case line == "":
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	if a.completed == nil {
		t.Errorf("the stream ended without response.completed")
	}
	return a
}

func openaiPost(t *testing.T, srv *httptest.Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer sk-fake-key")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestOpenAIResponses(t *testing.T) {
	patch := func(name string) string {
		return "*** Begin Patch\n*** Add File: " + name + "\n+hello from the fake model\n*** End Patch\n"
	}
	escalated := func(args map[string]any) map[string]any {
		args["workdir"] = codexCwd
		args["sandbox_permissions"] = "require_escalated"
		args["justification"] = "Do you want to allow creating ran.txt?"
		return args
	}
	for _, tc := range []struct {
		name     string
		body     string
		conv     Conversation
		text     string
		tool     map[string]any // the tool call item without its ids; nil for none
		toolArgs map[string]any // a function call's arguments, decoded
	}{{
		name: "WriteAsksForApplyPatch",
		body: codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please write notes.txt")),
		conv: Conversation{Prompt: "please write notes.txt"},
		text: BeforeText("notes.txt"),
		tool: map[string]any{"type": "custom_tool_call", "status": "completed", "name": "apply_patch", "input": patch("notes.txt")},
	}, {
		name: "AfterThePatch",
		body: codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please write notes.txt"),
			codexMessage("assistant", BeforeText("notes.txt")), codexCustomCall("fakecall_1", patch("notes.txt")),
			codexCustomOutput("fakecall_1", "Success. Updated the following files:\nA notes.txt\n")),
		conv: Conversation{Prompt: "please write notes.txt", ToolResults: 1},
		text: AfterText("notes.txt"),
	}, {
		name: "DeniedPatchThenNextTurn",
		body: codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please write denied.txt"),
			codexMessage("assistant", BeforeText("denied.txt")), codexCustomCall("fakecall_1", patch("denied.txt")),
			codexCustomOutput("fakecall_1", "aborted by user"), codexAbortedItem, codexMessage("user", "please write second.txt")),
		conv: Conversation{Prompt: "please write second.txt"},
		text: BeforeText("second.txt"),
		tool: map[string]any{"type": "custom_tool_call", "status": "completed", "name": "apply_patch", "input": patch("second.txt")},
	}, {
		name:     "ShellAsksToLeaveTheSandbox",
		body:     codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please shell ran.txt")),
		conv:     Conversation{Prompt: "please shell ran.txt"},
		text:     BeforeText("ran.txt"),
		tool:     map[string]any{"type": "function_call", "status": "completed", "name": "exec_command"},
		toolArgs: escalated(map[string]any{"cmd": ShellCommand("ran.txt")}),
	}, {
		name: "AfterTheShell",
		body: codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please shell ran.txt"),
			codexMessage("assistant", BeforeText("ran.txt")),
			codexFunctionCall("fakecall_1", "exec_command", `{"cmd":"echo shell \u003e ran.txt","sandbox_permissions":"require_escalated"}`),
			codexFunctionOutput("fakecall_1", "Process exited with code 0\nOutput:\n")),
		conv: Conversation{Prompt: "please shell ran.txt", ToolResults: 1},
		text: AfterText("ran.txt"),
	}, {
		name:     "ShellCommandTool",
		body:     codexRequest(codexOlderTools, codexEnvironmentItem, codexMessage("user", "please shell ran.txt")),
		conv:     Conversation{Prompt: "please shell ran.txt"},
		text:     BeforeText("ran.txt"),
		tool:     map[string]any{"type": "function_call", "status": "completed", "name": "shell_command"},
		toolArgs: escalated(map[string]any{"command": ShellCommand("ran.txt")}),
	}, {
		name:     "ShellTool",
		body:     codexRequest(codexShellTools, codexEnvironmentItem, codexMessage("user", "please shell ran.txt")),
		conv:     Conversation{Prompt: "please shell ran.txt"},
		text:     BeforeText("ran.txt"),
		tool:     map[string]any{"type": "function_call", "status": "completed", "name": "shell"},
		toolArgs: escalated(map[string]any{"command": []any{"bash", "-lc", ShellCommand("ran.txt")}}),
	}, {
		name:     "ApplyPatchFunction",
		body:     codexRequest(codexOlderTools, codexEnvironmentItem, codexMessage("user", "please write notes.txt")),
		conv:     Conversation{Prompt: "please write notes.txt"},
		text:     BeforeText("notes.txt"),
		tool:     map[string]any{"type": "function_call", "status": "completed", "name": "apply_patch"},
		toolArgs: map[string]any{"input": patch("notes.txt")},
	}, {
		name: "InstructionsAreNoPrompt",
		body: codexRequest(codexTools, codexPermissionsItem, codexAgentsItem, codexEnvironmentItem, codexMessage("user", "hello there")),
		conv: Conversation{Prompt: "hello there"},
		text: PlainText,
	}, {
		// The prompt and what Codex adds to it can share one message.
		name:     "PromptBesideContext",
		body:     codexRequest(codexTools, codexMessage("user", "<environment_context>\n  <cwd>"+codexCwd+"</cwd>\n</environment_context>", "please shell ran.txt")),
		conv:     Conversation{Prompt: "please shell ran.txt"},
		text:     BeforeText("ran.txt"),
		tool:     map[string]any{"type": "function_call", "status": "completed", "name": "exec_command"},
		toolArgs: escalated(map[string]any{"cmd": ShellCommand("ran.txt")}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			script := &Script{}
			srv := httptest.NewServer(NewOpenAI(script))
			defer srv.Close()
			resp := openaiPost(t, srv, tc.body)
			if got, want := resp.StatusCode, http.StatusOK; got != want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", got, want, b)
			}
			if got, want := resp.Header.Get("Content-Type"), "text/event-stream"; got != want {
				t.Errorf("Content-Type %q, want %q", got, want)
			}
			a := readOpenAIStream(t, resp.Body)
			if a.text != tc.text {
				t.Errorf("text %q, want %q", a.text, tc.text)
			}
			var calls []map[string]any
			for _, it := range a.items {
				if it["type"] != "message" {
					calls = append(calls, it)
				}
			}
			switch {
			case tc.tool == nil && len(calls) > 0:
				t.Errorf("tool calls %v, want none", calls)
			case tc.tool != nil && len(calls) != 1:
				t.Errorf("tool calls %v, want one", calls)
			case tc.tool != nil:
				call := calls[0]
				if id, _ := call["call_id"].(string); !strings.HasPrefix(id, ToolIDPrefix) {
					t.Errorf("call_id %q does not start with %q", id, ToolIDPrefix)
				}
				got := map[string]any{}
				for k, v := range call {
					if k != "id" && k != "call_id" && k != "arguments" {
						got[k] = v
					}
				}
				if !reflect.DeepEqual(got, tc.tool) {
					t.Errorf("tool call %v, want %v", got, tc.tool)
				}
				if tc.toolArgs != nil {
					var args map[string]any
					if err := json.Unmarshal([]byte(call["arguments"].(string)), &args); err != nil {
						t.Fatalf("arguments %v: %v", call["arguments"], err)
					}
					if !reflect.DeepEqual(args, tc.toolArgs) {
						t.Errorf("arguments %v, want %v", args, tc.toolArgs)
					}
				}
			}
			wantUsage := map[string]any{
				"input_tokens": float64(OpenAIInputTokens), "output_tokens": float64(OpenAIOutputTokens),
				"total_tokens":          float64(OpenAIInputTokens + OpenAIOutputTokens),
				"input_tokens_details":  map[string]any{"cached_tokens": float64(OpenAICachedTokens)},
				"output_tokens_details": map[string]any{"reasoning_tokens": float64(0)},
			}
			if got := a.completed["usage"]; !reflect.DeepEqual(got, wantUsage) {
				t.Errorf("usage %v, want %v", got, wantUsage)
			}
			reqs := script.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests recorded, want 1", len(reqs))
			}
			if r := reqs[0]; r.API != "openai" || r.Path != "/v1/responses" || r.Side || r.Conv != tc.conv || string(r.Body) != tc.body {
				t.Errorf("recorded %s %s side=%v %+v, want openai /v1/responses side=false %+v and the body", r.API, r.Path, r.Side, r.Conv, tc.conv)
			}
		})
	}
}

func TestOpenAIErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		status  int
		message string
	}{{
		name:    "Fail",
		body:    codexRequest(codexTools, codexPermissionsItem, codexEnvironmentItem, codexMessage("user", "please fail")),
		status:  http.StatusBadRequest,
		message: FailText,
	}, {
		name:    "NoToolToWriteWith",
		body:    codexRequest(codexShellTools, codexEnvironmentItem, codexMessage("user", "please write notes.txt")),
		status:  http.StatusBadRequest,
		message: "the request offers no apply_patch tool to write notes.txt with",
	}, {
		name:    "NotJSON",
		body:    `{"input":`,
		status:  http.StatusBadRequest,
		message: "the request body is not JSON: unexpected end of JSON input",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(NewOpenAI(&Script{}))
			defer srv.Close()
			resp := openaiPost(t, srv, tc.body)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			// code stays null: Codex reads some codes (context length,
			// quota) as reasons to act, and a plain 400 must not be one.
			if e := body.Error; e.Message != tc.message || e.Type != "invalid_request_error" || e.Code != nil {
				t.Errorf("error %+v, want message %q, type invalid_request_error, code null", e, tc.message)
			}
		})
	}
}

func TestOpenAISideRequests(t *testing.T) {
	script := &Script{}
	srv := httptest.NewServer(NewOpenAI(script))
	defer srv.Close()

	t.Run("Models", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + "/v1/models?client_version=0.137.0")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Data   []any `json:"data"`
			Models []any `json:"models"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK || list.Data == nil || list.Models == nil {
			t.Errorf("GET /v1/models: %d %+v %v, want 200 with empty data and models", resp.StatusCode, list, err)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		resp, err := srv.Client().Post(srv.URL+"/v1/responses/compact", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", resp.StatusCode)
		}
	})
	t.Run("Proxied", func(t *testing.T) {
		// What Codex sends through its proxy variables, which point at
		// the fake: an absolute URL for a host that is not the fake's.
		proxy, _ := url.Parse(srv.URL)
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
		resp, err := client.Get("http://elsewhere.invalid/v1/telemetry")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("status %d, want 403", resp.StatusCode)
		}
	})

	var got []Request
	for _, r := range script.Requests() {
		got = append(got, Request{API: r.API, Path: r.Path, Side: r.Side})
	}
	want := []Request{
		{API: "openai", Path: "/v1/models", Side: true},
		{API: "openai", Path: "/v1/responses/compact", Side: true},
		{API: "openai", Path: "GET elsewhere.invalid", Side: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
}

// TestOpenAISlowEndsWithTheClient checks that a slow answer streams until
// the client goes away and then ends: Close waits for every handler, so it
// returns only once the slow one has noticed.
func TestOpenAISlowEndsWithTheClient(t *testing.T) {
	script := &Script{}
	srv := httptest.NewServer(NewOpenAI(script))
	ctx, cancel := context.WithCancel(context.Background())
	body := codexRequest(codexTools, codexEnvironmentItem, codexMessage("user", "be slow"))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	deltas := 0
	for deltas < 2 && sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "response.output_text.delta":
			if ev.Delta != SlowChunk {
				t.Errorf("delta %q, want %q", ev.Delta, SlowChunk)
			}
			deltas++
		case "response.completed", "response.output_item.done":
			t.Fatalf("%s before the client went away", ev.Type)
		}
	}
	if deltas < 2 {
		t.Fatalf("the stream ended after %d deltas: %v", deltas, sc.Err())
	}
	cancel()
	resp.Body.Close()
	srv.Close()
	if reqs := script.Requests(); len(reqs) != 1 || reqs[0].Conv.Prompt != "be slow" {
		t.Errorf("recorded %+v, want the one slow request", reqs)
	}
}
