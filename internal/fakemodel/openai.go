package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// NewOpenAI returns the fake OpenAI Responses API that Codex is pointed at
// (a model provider with wire_api "responses" and base_url <server>/v1):
// POST /v1/responses answers with the streamed events Codex parses, GET
// /v1/models with an empty list, anything else 404 in the API's error shape,
// and a proxy request 403.
func NewOpenAI(s *Script) http.Handler {
	o := &openaiServer{script: s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", o.responses)
	mux.HandleFunc("GET /v1/models", o.models)
	mux.HandleFunc("/", o.notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The adapter's proxy variables point here, so a request for any
		// other host arrives as a CONNECT (or an absolute URL): record
		// it, where a test can see that something tried the network, and
		// refuse it.
		if r.Method == http.MethodConnect || r.URL.IsAbs() {
			o.script.Record(Request{API: "openai", Path: r.Method + " " + r.URL.Host, Side: true})
			http.Error(w, "the fake model API is no proxy", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// The usage every response reports, the same each time so that a test can
// look for it where the adapter reports usage (codex-acp: a usage_update
// whose used is the input plus output tokens of the last response).
const (
	OpenAIInputTokens  = 120
	OpenAICachedTokens = 20
	OpenAIOutputTokens = 30
)

// The slow reply's pace and bound. The bound keeps a client that never
// disconnects (a cancel that did not reach the model) from holding a
// request, and the test, for ever.
const (
	openaiSlowInterval = 100 * time.Millisecond
	openaiSlowFor      = 60 * time.Second
)

type openaiServer struct {
	script *Script
	ids    atomic.Int64
}

// openaiRequest is what the fake reads of a Responses request; the rest
// (instructions, reasoning, include, prompt_cache_key…) changes nothing in
// the answer. Codex always asks for a stream, so the answer always is one.
type openaiRequest struct {
	Model string       `json:"model"`
	Input []openaiItem `json:"input"`
	Tools []openaiTool `json:"tools"`
}

// openaiItem is one input item: a message (content a string or a list of
// parts), a tool call the model made earlier, or a tool result.
type openaiItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type openaiTool struct {
	Type string `json:"type"` // "function", "custom", "web_search", "namespace"…
	Name string `json:"name"`
}

// openaiToolResults are the input item types that carry a tool's result back
// to the model.
var openaiToolResults = map[string]bool{
	"function_call_output":    true,
	"custom_tool_call_output": true,
}

func (o *openaiServer) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		o.script.Record(Request{API: "openai", Path: r.URL.Path, Body: body, Side: true})
		openaiError(w, http.StatusBadRequest, "invalid_request_error", "the request body is not JSON: "+err.Error())
		return
	}
	conv, cwd := openaiConversation(req.Input)
	// A request with no prompt of the user's (a summary or a title Codex
	// asks for on its own) is a side request: a short answer, no tools.
	side := conv.Prompt == ""
	o.script.Record(Request{API: "openai", Path: r.URL.Path, Body: body, Conv: conv, Side: side})
	reply := Reply{Text: PlainText}
	if !side {
		reply = o.script.Next(conv)
	}
	if reply.Fail != 0 {
		openaiError(w, reply.Fail, "invalid_request_error", FailText)
		return
	}
	var call map[string]any
	if reply.Tool != nil {
		call, err = o.toolCall(reply.Tool, req.Tools, cwd)
		if err != nil {
			openaiError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st := &openaiStream{w: w, rc: http.NewResponseController(w)}
	respID := o.id("resp")
	response := map[string]any{"id": respID, "object": "response", "model": req.Model, "status": "in_progress", "output": []any{}}
	st.send("response.created", map[string]any{"response": response})

	var output []any
	if reply.Slow {
		output = append(output, o.slowMessage(r, st, len(output)))
	} else if reply.Text != "" {
		output = append(output, o.message(st, len(output), Chunks(reply.Text)))
	}
	if call != nil {
		call["id"] = o.id("fc")
		st.send("response.output_item.added", map[string]any{"output_index": len(output), "item": openaiPending(call)})
		st.send("response.output_item.done", map[string]any{"output_index": len(output), "item": call})
		output = append(output, call)
	}
	if r.Context().Err() != nil {
		return
	}
	response["status"] = "completed"
	response["output"] = output
	response["usage"] = map[string]any{
		"input_tokens":          OpenAIInputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": OpenAICachedTokens},
		"output_tokens":         OpenAIOutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          OpenAIInputTokens + OpenAIOutputTokens,
	}
	st.send("response.completed", map[string]any{"response": response})
}

// message streams one assistant message made of chunks and returns its
// final item.
func (o *openaiServer) message(st *openaiStream, index int, chunks []string) map[string]any {
	id := o.id("msg")
	st.send("response.output_item.added", map[string]any{"output_index": index, "item": map[string]any{
		"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []any{},
	}})
	st.send("response.content_part.added", map[string]any{"item_id": id, "output_index": index, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	var text strings.Builder
	for _, c := range chunks {
		text.WriteString(c)
		st.send("response.output_text.delta", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "delta": c})
	}
	return o.closeMessage(st, id, index, text.String())
}

// slowMessage streams SlowChunk until the client goes away or the bound
// passes; only in the second case does the message close.
func (o *openaiServer) slowMessage(r *http.Request, st *openaiStream, index int) map[string]any {
	id := o.id("msg")
	st.send("response.output_item.added", map[string]any{"output_index": index, "item": map[string]any{
		"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []any{},
	}})
	var text strings.Builder
	tick := time.NewTicker(openaiSlowInterval)
	defer tick.Stop()
	deadline := time.NewTimer(openaiSlowFor)
	defer deadline.Stop()
	for {
		text.WriteString(SlowChunk)
		if err := st.send("response.output_text.delta", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "delta": SlowChunk}); err != nil {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-deadline.C:
			return o.closeMessage(st, id, index, text.String())
		case <-tick.C:
		}
	}
}

func (o *openaiServer) closeMessage(st *openaiStream, id string, index int, text string) map[string]any {
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	st.send("response.output_text.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "text": text})
	st.send("response.content_part.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "part": part})
	item := map[string]any{"type": "message", "id": id, "role": "assistant", "status": "completed", "content": []any{part}}
	st.send("response.output_item.done", map[string]any{"output_index": index, "item": item})
	return item
}

// toolCall expresses a script tool call with the tools the request offers:
// a write with apply_patch (freeform or as a function), a shell command with
// whichever shell tool Codex gave this model.
func (o *openaiServer) toolCall(t *ToolCall, tools []openaiTool, cwd string) (map[string]any, error) {
	has := map[string]string{}
	for _, tl := range tools {
		has[tl.Name] = tl.Type
	}
	// Codex hands the call id on to the ACP client as its tool call id,
	// so a test can tell it by the prefix if it ever leaks.
	callID := o.id(ToolIDPrefix)
	switch t.Kind {
	case "write":
		patch := openaiAddFilePatch(t.Path, t.Content)
		switch has["apply_patch"] {
		case "custom":
			return map[string]any{"type": "custom_tool_call", "status": "completed", "call_id": callID, "name": "apply_patch", "input": patch}, nil
		case "function":
			return openaiFunctionCall(callID, "apply_patch", map[string]any{"input": patch}), nil
		}
		return nil, fmt.Errorf("the request offers no apply_patch tool to write %s with", t.Path)
	case "shell":
		// The command writes a file, which Codex's default read-only
		// sandbox forbids; its instructions tell the model to ask for an
		// unsandboxed run then, as a real model does, and that request is
		// what makes Codex ask the user.
		esc := func(args map[string]any) map[string]any {
			args["workdir"] = cwd
			args["sandbox_permissions"] = "require_escalated"
			args["justification"] = "Do you want to allow creating " + t.Path + "?"
			return args
		}
		switch {
		case has["exec_command"] == "function":
			return openaiFunctionCall(callID, "exec_command", esc(map[string]any{"cmd": t.Command})), nil
		case has["shell_command"] == "function":
			return openaiFunctionCall(callID, "shell_command", esc(map[string]any{"command": t.Command})), nil
		case has["shell"] == "function":
			return openaiFunctionCall(callID, "shell", esc(map[string]any{"command": []string{"bash", "-lc", t.Command}})), nil
		}
		return nil, fmt.Errorf("the request offers no shell tool to run %q with", t.Command)
	case "plan":
		if has["update_plan"] != "function" {
			return nil, fmt.Errorf("the request offers no update_plan tool")
		}
		plan := make([]map[string]any, len(t.Plan))
		for i, st := range t.Plan {
			plan[i] = map[string]any{"step": st.Content, "status": st.Status}
		}
		return openaiFunctionCall(callID, "update_plan", map[string]any{"plan": plan}), nil
	}
	return nil, fmt.Errorf("unknown tool kind %q", t.Kind)
}

func openaiFunctionCall(callID, name string, args map[string]any) map[string]any {
	if wd, ok := args["workdir"]; ok && wd == "" {
		delete(args, "workdir")
	}
	b, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "status": "completed", "call_id": callID, "name": name, "arguments": string(b)}
}

// openaiPending is a tool call item as output_item.added announces it,
// before its arguments have streamed.
func openaiPending(call map[string]any) map[string]any {
	p := map[string]any{}
	for k, v := range call {
		p[k] = v
	}
	p["status"] = "in_progress"
	switch call["type"] {
	case "function_call":
		p["arguments"] = ""
	case "custom_tool_call":
		p["input"] = ""
	}
	return p
}

// openaiAddFilePatch is the apply_patch envelope that creates path with
// content. The path stays relative: apply_patch resolves it against the
// turn's working directory.
func openaiAddFilePatch(path, content string) string {
	var b strings.Builder
	b.WriteString("*** Begin Patch\n*** Add File: " + path + "\n")
	for _, line := range strings.SplitAfter(strings.TrimSuffix(content, "\n"), "\n") {
		b.WriteString("+" + strings.TrimSuffix(line, "\n") + "\n")
	}
	b.WriteString("*** End Patch\n")
	return b.String()
}

var openaiCwdRe = regexp.MustCompile(`<cwd>([^<]*)</cwd>`)

// openaiConversation reduces a request's input to what the script needs, and
// the working directory Codex states in its environment context.
func openaiConversation(items []openaiItem) (Conversation, string) {
	var c Conversation
	var cwd string
	for _, it := range items {
		switch {
		case openaiToolResults[it.Type]:
			c.ToolResults++
		case it.Type == "message" && it.Role == "user":
			var typed []string
			for _, text := range openaiTexts(it.Content) {
				if m := openaiCwdRe.FindStringSubmatch(text); m != nil {
					cwd = m[1]
				}
				if !openaiInjected(text) {
					typed = append(typed, text)
				}
			}
			if len(typed) > 0 {
				c = Conversation{Prompt: strings.Join(typed, "\n")}
			}
		}
	}
	return c, cwd
}

// openaiInjected tells the user-role text Codex writes itself (the
// environment context, AGENTS.md instructions, plugin and skill lists, the
// note about an aborted turn) from what the user typed: Codex wraps each of
// them in a tag or a heading of its own.
func openaiInjected(text string) bool {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "# AGENTS.md instructions") {
		return true
	}
	if !strings.HasPrefix(t, "<") {
		return false
	}
	end := strings.IndexAny(t, "> \n")
	if end < 2 {
		return false
	}
	return strings.HasSuffix(t, "</"+t[1:end]+">")
}

// openaiTexts are the texts of a message's content: a plain string, or its
// input_text/output_text parts.
func openaiTexts(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var texts []string
	for _, p := range parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return texts
}

func (o *openaiServer) models(w http.ResponseWriter, r *http.Request) {
	o.script.Record(Request{API: "openai", Path: r.URL.Path, Side: true})
	// Both shapes at once: the public API's list ("data") and the one Codex
	// reads ("models"); empty, so Codex keeps the model its config names.
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"object":"list","data":[],"models":[]}`)
}

func (o *openaiServer) notFound(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	o.script.Record(Request{API: "openai", Path: r.URL.Path, Body: body, Side: true})
	openaiError(w, http.StatusNotFound, "invalid_request_error", "no fake for "+r.Method+" "+r.URL.Path)
}

// openaiError answers in the API's error shape. A 400 is not among the
// statuses Codex retries, so a failing turn fails once.
func openaiError(w http.ResponseWriter, status int, typ, message string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": nil,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func (o *openaiServer) id(prefix string) string {
	return prefix + "_" + strconv.FormatInt(o.ids.Add(1), 10)
}

// openaiStream writes the SSE events of one response, each flushed at once
// so the client sees the text as it streams.
type openaiStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	seq int
	err error
}

func (st *openaiStream) send(typ string, ev map[string]any) error {
	if st.err != nil {
		return st.err
	}
	ev["type"] = typ
	ev["sequence_number"] = st.seq
	st.seq++
	b, err := json.Marshal(ev)
	if err != nil {
		st.err = err
		return err
	}
	if _, err := fmt.Fprintf(st.w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
		st.err = err
		return err
	}
	st.err = st.rc.Flush()
	return st.err
}
