package fakemodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// The Gemini API as Gemini CLI calls it through @google/genai:
//
//	POST /v1beta/models/{model}:streamGenerateContent?alt=sse  the chat turns
//	POST /v1beta/models/{model}:generateContent                utility calls
//	POST /v1beta/models/{model}:countTokens                    token counts
//
// A turn is a streamed request that declares tools: that is how the CLI's
// main chat differs from its utility calls (the next-speaker check, loop
// detection, the model router's classifier, summaries), which declare none
// and are answered minimally as side requests.

const (
	// geminiSlowInterval and geminiSlowFor pace a Slow reply: a chunk every
	// interval until the client goes away, bounded so a client that never
	// cancels cannot hold a handler forever.
	geminiSlowInterval = 100 * time.Millisecond
	geminiSlowFor      = 60 * time.Second

	// geminiMaxBody bounds a request body, which the handler holds whole.
	// The CLI sends its history, system prompt and tool declarations on
	// every request: about 50 KiB at the start of a session.
	geminiMaxBody = 32 << 20
)

// Gemini returns the fake Gemini API, following s.
func Gemini(s *Script) http.Handler {
	return &geminiServer{script: s, slowInterval: geminiSlowInterval, slowFor: geminiSlowFor}
}

type geminiServer struct {
	script       *Script
	slowInterval time.Duration
	slowFor      time.Duration
	calls        atomic.Int64 // numbers the function calls' ids
}

type (
	geminiRequest struct {
		Contents          []geminiContent `json:"contents"`
		SystemInstruction *geminiContent  `json:"systemInstruction"`
		Tools             []struct {
			FunctionDeclarations []geminiDeclaration `json:"functionDeclarations"`
		} `json:"tools"`
		GenerationConfig struct {
			ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
			ResponseSchema     json.RawMessage `json:"responseSchema"`
		} `json:"generationConfig"`
	}
	geminiContent struct {
		Role  string       `json:"role,omitempty"`
		Parts []geminiPart `json:"parts"`
	}
	geminiPart struct {
		Text             string                `json:"text,omitempty"`
		Thought          bool                  `json:"thought,omitempty"`
		FunctionCall     *geminiFunctionCall   `json:"functionCall,omitempty"`
		FunctionResponse *geminiFunctionResult `json:"functionResponse,omitempty"`
	}
	geminiFunctionCall struct {
		ID   string         `json:"id,omitempty"`
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	}
	geminiFunctionResult struct {
		ID   string `json:"id,omitempty"`
		Name string `json:"name"`
	}
	geminiDeclaration struct {
		Name string `json:"name"`
		// The CLI sends parametersJsonSchema; the older field is parameters.
		ParametersJSONSchema *geminiSchema `json:"parametersJsonSchema"`
		Parameters           *geminiSchema `json:"parameters"`
	}
	geminiSchema struct {
		Type       any                     `json:"type"` // "object", or ["string","null"]
		Properties map[string]geminiSchema `json:"properties"`
		Required   []string                `json:"required"`
		Enum       []any                   `json:"enum"`
		Minimum    *float64                `json:"minimum"`
	}

	geminiResponse struct {
		Candidates    []geminiCandidate `json:"candidates"`
		UsageMetadata *geminiUsage      `json:"usageMetadata,omitempty"`
		ModelVersion  string            `json:"modelVersion,omitempty"`
	}
	geminiCandidate struct {
		Content      geminiContent `json:"content"`
		FinishReason string        `json:"finishReason,omitempty"`
		Index        int           `json:"index"`
	}
	geminiUsage struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
		TotalTokenCount      int `json:"totalTokenCount"`
	}
)

func (s *geminiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, geminiMaxBody+1))
	// Everything is a side request but a chat turn; anything the CLI may
	// try that is not served (listing models, embeddings) is recorded too,
	// so a test sees it, and refused in the API's own shape.
	rec := Request{API: "gemini", Path: r.URL.Path, Body: body, Side: true}
	model, method, routed := geminiRoute(r)
	var req geminiRequest
	switch {
	case err != nil || len(body) > geminiMaxBody:
		s.script.Record(rec)
		geminiError(w, http.StatusBadRequest, "the request body is unreadable or too large")
	case !routed:
		s.script.Record(rec)
		geminiError(w, http.StatusNotFound, "the fake Gemini API does not serve "+r.Method+" "+r.URL.Path)
	case json.Unmarshal(body, &req) != nil:
		s.script.Record(rec)
		geminiError(w, http.StatusBadRequest, "invalid JSON payload")
	case method == "countTokens":
		s.script.Record(rec)
		writeJSON(w, map[string]int{"totalTokens": approxTokens(body)})
	case method == "streamGenerateContent" && req.declaration("") != nil:
		rec.Side, rec.Conv = false, req.conversation()
		s.script.Record(rec)
		s.turn(r.Context(), w, model, body, req, s.script.Next(rec.Conv))
	case method == "streamGenerateContent" || method == "generateContent":
		s.script.Record(rec)
		s.side(w, model, body, method == "streamGenerateContent", req)
	default:
		s.script.Record(rec)
		geminiError(w, http.StatusNotFound, "the fake Gemini API has no method "+method)
	}
}

// geminiRoute splits /{version}/models/{model}:{method}.
func geminiRoute(r *http.Request) (model, method string, ok bool) {
	if r.Method != http.MethodPost {
		return "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 3 || parts[1] != "models" {
		return "", "", false
	}
	model, method, ok = strings.Cut(parts[2], ":")
	return model, method, ok && model != "" && method != ""
}

// contextPartRe matches a part that is one tagged block, such as the
// <session_context> (date, OS, workspace, folder listing) the CLI puts in
// the same message as the user's first prompt: the CLI's words, not the
// user's.
var contextPartRe = regexp.MustCompile(`^\s*<([A-Za-z_][A-Za-z0-9_-]*)>[\s\S]*</([A-Za-z_][A-Za-z0-9_-]*)>\s*$`)

// conversation reduces a chat request to what the script needs. The prompt
// is the last user message that carries text of the user's and no function
// response: the CLI sends tool results as user messages of functionResponse
// parts after the prompt.
func (req geminiRequest) conversation() Conversation {
	var c Conversation
	for i := len(req.Contents) - 1; i >= 0; i-- {
		m := req.Contents[i]
		if m.Role != "user" {
			continue
		}
		results, text := 0, ""
		for _, p := range m.Parts {
			if p.FunctionResponse != nil {
				results++
			} else if !p.Thought && !isContextPart(p.Text) {
				text += p.Text
			}
		}
		if results > 0 {
			c.ToolResults += results
			continue
		}
		if strings.TrimSpace(text) != "" {
			c.Prompt = text
			return c
		}
	}
	return c
}

func isContextPart(text string) bool {
	m := contextPartRe.FindStringSubmatch(text)
	return m != nil && m[1] == m[2]
}

// declaration returns the declared function of that name, or with name ""
// the first one declared.
func (req geminiRequest) declaration(name string) *geminiDeclaration {
	for _, t := range req.Tools {
		for i, d := range t.FunctionDeclarations {
			if name == "" || d.Name == name {
				return &t.FunctionDeclarations[i]
			}
		}
	}
	return nil
}

func (d *geminiDeclaration) schema() *geminiSchema {
	if d.ParametersJSONSchema != nil {
		return d.ParametersJSONSchema
	}
	if d.Parameters != nil {
		return d.Parameters
	}
	return &geminiSchema{}
}

// param finds the parameter of d whose name contains want ("path",
// "content", "command"), so the call follows the CLI's own declaration
// rather than a name this file would have to keep up with.
func (d *geminiDeclaration) param(want string) (string, bool) {
	s := d.schema()
	if _, ok := s.Properties[want]; ok {
		return want, true
	}
	for _, r := range s.Required {
		if strings.Contains(r, want) {
			return r, true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.Properties)) {
		if strings.Contains(p, want) {
			return p, true
		}
	}
	return "", false
}

// workDirRe finds the working directory in the session context the CLI
// sends with the first prompt ("- **Workspace Directories:**\n  - /…").
var workDirRe = regexp.MustCompile(`Workspace Directories:\**\s*\n\s*- (/[^\n]*)`)

func (req geminiRequest) workDir() string {
	for _, m := range req.Contents {
		for _, p := range m.Parts {
			if dir := workDirRe.FindStringSubmatch(p.Text); dir != nil {
				return strings.TrimSpace(dir[1])
			}
		}
	}
	return ""
}

// call expresses a script tool call with the CLI's own tools: write_file
// for a write, run_shell_command for a shell command, write_todos for a
// plan. ok is false when the
// request does not declare the tool.
func (req geminiRequest) call(tc *ToolCall) (geminiFunctionCall, bool) {
	args := map[string]any{}
	switch tc.Kind {
	case "write":
		d := req.declaration("write_file")
		if d == nil {
			return geminiFunctionCall{}, false
		}
		pathParam, ok1 := d.param("path")
		contentParam, ok2 := d.param("content")
		if !ok1 || !ok2 {
			return geminiFunctionCall{}, false
		}
		// The path is absolute, as a real model writes it, when the
		// request says where the CLI works.
		path := tc.Path
		if dir := req.workDir(); dir != "" {
			path = filepath.Join(dir, tc.Path)
		}
		args[pathParam], args[contentParam] = path, tc.Content
		return geminiFunctionCall{Name: d.Name, Args: args}, true
	case "shell":
		d := req.declaration("run_shell_command")
		if d == nil {
			return geminiFunctionCall{}, false
		}
		cmdParam, ok := d.param("command")
		if !ok {
			return geminiFunctionCall{}, false
		}
		args[cmdParam] = tc.Command
		if p, ok := d.param("description"); ok {
			args[p] = "Write " + tc.Path
		}
		return geminiFunctionCall{Name: d.Name, Args: args}, true
	case "plan":
		d := req.declaration("write_todos")
		if d == nil {
			return geminiFunctionCall{}, false
		}
		todosParam, ok := d.param("todos")
		if !ok {
			return geminiFunctionCall{}, false
		}
		todos := make([]map[string]any, len(tc.Plan))
		for i, st := range tc.Plan {
			todos[i] = map[string]any{"description": st.Content, "status": st.Status}
		}
		args[todosParam] = todos
		return geminiFunctionCall{Name: d.Name, Args: args}, true
	}
	return geminiFunctionCall{}, false
}

// turn answers a chat request with the script's reply, streamed as the API
// streams: one GenerateContentResponse per SSE event, the last with the
// finish reason and the usage.
func (s *geminiServer) turn(ctx context.Context, w http.ResponseWriter, model string, body []byte, req geminiRequest, reply Reply) {
	if reply.Fail != 0 {
		geminiError(w, reply.Fail, FailText)
		return
	}
	sse := newGeminiSSE(w, model, approxTokens(body))
	if reply.Slow {
		t := time.NewTicker(s.slowInterval)
		defer t.Stop()
		deadline := time.NewTimer(s.slowFor)
		defer deadline.Stop()
		for {
			if sse.send([]geminiPart{{Text: SlowChunk}}, "") != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-deadline.C:
				sse.send([]geminiPart{{Text: SlowChunk}}, "STOP")
				return
			case <-t.C:
			}
		}
	}
	var last []geminiPart
	chunks := Chunks(reply.Text)
	if reply.Tool != nil {
		if fc, ok := req.call(reply.Tool); ok {
			// The API may give a call an id, and the CLI then makes it its
			// ACP toolCallId: a test can look for the prefix in events.
			fc.ID = fmt.Sprintf("%s_%d", ToolIDPrefix, s.calls.Add(1))
			last = []geminiPart{{FunctionCall: &fc}}
		} else {
			chunks = Chunks(reply.Text + " The " + reply.Tool.Kind + " tool is not declared.")
		}
	}
	if last == nil && len(chunks) > 0 {
		last, chunks = []geminiPart{{Text: chunks[len(chunks)-1]}}, chunks[:len(chunks)-1]
	}
	for _, c := range chunks {
		if sse.send([]geminiPart{{Text: c}}, "") != nil {
			return
		}
	}
	sse.send(last, "STOP")
}

// side answers a utility request minimally: JSON that satisfies the
// requested schema (the next-speaker check gets "user", a classifier its
// first choice or lowest score), else a short text.
func (s *geminiServer) side(w http.ResponseWriter, model string, body []byte, stream bool, req geminiRequest) {
	text := PlainText
	if raw := req.GenerationConfig.ResponseJSONSchema; len(raw) > 0 {
		text = minimalJSON(raw)
	} else if raw := req.GenerationConfig.ResponseSchema; len(raw) > 0 {
		text = minimalJSON(raw)
	}
	parts := []geminiPart{{Text: text}}
	if stream {
		newGeminiSSE(w, model, approxTokens(body)).send(parts, "STOP")
		return
	}
	writeJSON(w, geminiResponse{
		Candidates:    []geminiCandidate{{Content: geminiContent{Role: "model", Parts: parts}, FinishReason: "STOP"}},
		UsageMetadata: &geminiUsage{PromptTokenCount: approxTokens(body), CandidatesTokenCount: 1, TotalTokenCount: approxTokens(body) + 1},
		ModelVersion:  model,
	})
}

func minimalJSON(raw json.RawMessage) string {
	var s geminiSchema
	if json.Unmarshal(raw, &s) != nil {
		return "{}"
	}
	b, _ := json.Marshal(s.minimal())
	return string(b)
}

// minimal is the smallest value the schema accepts: the first of an enum,
// the required properties of an object, a number's minimum, a zero of
// anything else.
func (s geminiSchema) minimal() any {
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ, _ := s.Type.(string)
	if types, ok := s.Type.([]any); ok && len(types) > 0 {
		typ, _ = types[0].(string)
	}
	switch strings.ToLower(typ) {
	case "object", "":
		o := map[string]any{}
		for _, name := range s.Required {
			o[name] = s.Properties[name].minimal()
		}
		return o
	case "array":
		return []any{}
	case "string":
		return ""
	case "number", "integer":
		if s.Minimum != nil {
			return *s.Minimum
		}
		return 0
	case "boolean":
		return false
	}
	return nil
}

type geminiSSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	model   string
	prompt  int
	sent    int
	started bool
}

func newGeminiSSE(w http.ResponseWriter, model string, promptTokens int) *geminiSSE {
	return &geminiSSE{w: w, rc: http.NewResponseController(w), model: model, prompt: promptTokens}
}

// send writes one event; finish, when set, ends the candidate and carries
// the usage, as the API's last event does.
func (e *geminiSSE) send(parts []geminiPart, finish string) error {
	if !e.started {
		e.w.Header().Set("Content-Type", "text/event-stream")
		e.w.Header().Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
		e.started = true
	}
	for _, p := range parts {
		e.sent += approxTokens([]byte(p.Text)) + 1
	}
	resp := geminiResponse{
		Candidates:   []geminiCandidate{{Content: geminiContent{Role: "model", Parts: parts}, FinishReason: finish}},
		ModelVersion: e.model,
	}
	// Every event carries the usage so far, as the API's do.
	resp.UsageMetadata = &geminiUsage{PromptTokenCount: e.prompt, TotalTokenCount: e.prompt}
	if finish != "" {
		resp.UsageMetadata.CandidatesTokenCount = e.sent
		resp.UsageMetadata.TotalTokenCount = e.prompt + e.sent
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	// The SDK splits events on a blank line and reads one data line each.
	if _, err := fmt.Fprintf(e.w, "data: %s\r\n\r\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// geminiError writes the API's error body: {"error": {code, message, status}}.
func geminiError(w http.ResponseWriter, code int, message string) {
	status := map[int]string{
		http.StatusBadRequest:          "INVALID_ARGUMENT",
		http.StatusUnauthorized:        "UNAUTHENTICATED",
		http.StatusForbidden:           "PERMISSION_DENIED",
		http.StatusNotFound:            "NOT_FOUND",
		http.StatusTooManyRequests:     "RESOURCE_EXHAUSTED",
		http.StatusInternalServerError: "INTERNAL",
		http.StatusServiceUnavailable:  "UNAVAILABLE",
	}[code]
	if status == "" {
		status = "UNKNOWN"
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": message, "status": status}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	json.NewEncoder(w).Encode(v)
}

// approxTokens is the usual four bytes a token: the CLI shows and budgets
// with these counts, and nothing checks them.
func approxTokens(b []byte) int { return len(b)/4 + 1 }
