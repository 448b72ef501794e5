package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// AnthropicThinking is the thinking block the fake model streams before its
// text when the request enables thinking, so that tests can find the
// agent's reasoning part.
const AnthropicThinking = "Reading the request."

// anthropicSlowInterval and anthropicSlowFor pace a Slow reply: a chunk often
// enough that a cancel lands mid-stream, bounded so that a client that never
// cancels does not hold the handler forever.
const (
	anthropicSlowInterval = 100 * time.Millisecond
	anthropicSlowFor      = 60 * time.Second
)

// anthropicBodyLimit bounds what one request may carry: Claude Code's
// requests hold the whole conversation and its tool schemas (some 100 KiB),
// far below this.
const anthropicBodyLimit = 32 << 20

// Anthropic returns a handler serving the Anthropic Messages API as Claude
// Code calls it: POST /v1/messages (streamed or not), POST
// /v1/messages/count_tokens, GET /v1/models. Every other path, such as the
// HEAD / that Claude Code sends when it starts, is answered 404 in the API's
// error shape.
func Anthropic(s *Script) http.Handler {
	a := &anthropicAPI{script: s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", a.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", a.countTokens)
	mux.HandleFunc("GET /v1/models", a.models)
	mux.HandleFunc("/", a.other)
	return mux
}

type anthropicAPI struct {
	script *Script
	ids    atomic.Int64 // for message and tool use ids, unique per server
}

// anthropicRequest is the part of a Messages request the fake reads.
type anthropicRequest struct {
	Model    string             `json:"model"`
	Stream   bool               `json:"stream"`
	System   json.RawMessage    `json:"system"`
	Messages []anthropicMessage `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or an array of blocks
}

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// blocks returns the message's content as blocks; a string is one text block.
func (m anthropicMessage) blocks() []anthropicBlock {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

var (
	// What Claude Code puts in user messages that the user did not type:
	// system reminders (skills, the date, CLAUDE.md), the record of local
	// slash commands (the adapter runs /model when a session opens, and it
	// stays at the head of the history) and the mark of an interrupted turn.
	anthropicBoilerplateRe = regexp.MustCompile(`(?s)<system-reminder>.*?</system-reminder>` +
		`|<local-command-caveat>.*?</local-command-caveat>` +
		`|<local-command-stdout>.*?</local-command-stdout>` +
		`|<local-command-stderr>.*?</local-command-stderr>` +
		`|<command-name>.*?</command-name>|<command-message>.*?</command-message>|<command-args>.*?</command-args>` +
		`|\[Request interrupted by user[^\]]*\]`)
	// The environment section of Claude Code's system prompt names the cwd
	// (" - Primary working directory: /…"); its Write tool takes only
	// absolute paths.
	anthropicCwdRe = regexp.MustCompile(`(?m)^[ \t*-]*(?:Primary working directory|Working directory): *(/\S+)`)
)

// conversation reduces a request to what the script reads. Claude Code
// merges consecutive user messages, so one message can hold a tool result,
// the mark of an interrupted turn, the prompt before it and the next prompt:
// blocks are read in order, each text block the user typed is the prompt so
// far, and each tool_result after it counts.
func (r *anthropicRequest) conversation() Conversation {
	var c Conversation
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.blocks() {
			switch b.Type {
			case "tool_result":
				c.ToolResults++
			case "text":
				if t := strings.TrimSpace(anthropicBoilerplateRe.ReplaceAllString(b.Text, "")); t != "" {
					c = Conversation{Prompt: t}
				}
			}
		}
	}
	return c
}

// side tells a side request from a turn of the conversation: Claude Code
// sends every turn with its tool list, and its side queries (titles, topic
// detection, the quota probe, command prefixes; none came up in the suite's
// scenarios) with none.
func (r *anthropicRequest) side() bool { return len(r.Tools) == 0 }

// thinking tells whether the request asks for thinking blocks.
func (r *anthropicRequest) thinking() bool {
	return r.Thinking != nil && (r.Thinking.Type == "enabled" || r.Thinking.Type == "adaptive")
}

// cwd is the working directory the system prompt names, or "".
func (r *anthropicRequest) cwd() string {
	texts := []string{string(r.System)}
	var s string
	if json.Unmarshal(r.System, &s) == nil {
		texts[0] = s
	} else {
		var bs []anthropicBlock
		if json.Unmarshal(r.System, &bs) == nil {
			texts = texts[:0]
			for _, b := range bs {
				texts = append(texts, b.Text)
			}
		}
	}
	for _, m := range r.Messages {
		for _, b := range m.blocks() {
			texts = append(texts, b.Text)
		}
	}
	for _, t := range texts {
		if m := anthropicCwdRe.FindStringSubmatch(t); m != nil {
			return strings.TrimRight(m[1], "/")
		}
	}
	return ""
}

// tool picks the request's tool for a kind of call: Claude Code's built-in
// Write and Bash, or the adapter's MCP stand-ins for them where an adapter
// routes them through the client.
func (r *anthropicRequest) tool(kind string) string {
	want := map[string][]string{
		"write": {"Write", "mcp__acp__Write"},
		"shell": {"Bash", "mcp__acp__Bash"},
		"plan":  {"TodoWrite"},
	}[kind]
	for _, name := range want {
		for _, t := range r.Tools {
			if t.Name == name {
				return name
			}
		}
	}
	return want[0] // absent: the agent answers the call with an error result
}

// anthropicSideText answers side requests: short, and a valid answer to the
// ones that parse JSON (topic detection reads isNewTopic and title).
const anthropicSideText = `{"isNewTopic": false, "title": null}`

func (a *anthropicAPI) messages(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, anthropicBodyLimit))
	if err != nil {
		return
	}
	var r anthropicRequest
	if err := json.Unmarshal(body, &r); err != nil {
		a.script.Record(Request{API: "anthropic", Path: req.URL.Path, Body: body, Side: true})
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "the fake model cannot parse this request")
		return
	}
	conv := r.conversation()
	side := r.side()
	a.script.Record(Request{API: "anthropic", Path: req.URL.Path, Body: body, Conv: conv, Side: side})

	var reply Reply
	if side {
		reply = Reply{Text: anthropicSideText}
	} else {
		reply = a.script.Next(conv)
	}
	if reply.Fail != 0 {
		anthropicError(w, reply.Fail, "invalid_request_error", FailText)
		return
	}
	msg := a.message(&r, reply)
	if !r.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msg.final())
		return
	}
	a.stream(w, req, msg, reply.Slow)
}

// anthropicOut is one answer before it is written in either form.
type anthropicOut struct {
	id, model  string
	blocks     []map[string]any // content blocks, complete
	chunks     [][]string       // per block, the pieces its deltas carry
	stopReason string
	inTokens   int
}

func (o *anthropicOut) final() map[string]any {
	return map[string]any{
		"id": o.id, "type": "message", "role": "assistant", "model": o.model,
		"content": o.blocks, "stop_reason": o.stopReason, "stop_sequence": nil,
		"usage": o.usage(o.outTokens()),
	}
}

func (o *anthropicOut) outTokens() int {
	n := 1
	for _, c := range o.chunks {
		n += len(c)
	}
	return n
}

func (o *anthropicOut) usage(out int) map[string]any {
	return map[string]any{
		"input_tokens": o.inTokens, "output_tokens": out,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
	}
}

// message builds the answer to a request from the script's reply.
func (a *anthropicAPI) message(r *anthropicRequest, reply Reply) *anthropicOut {
	n := a.ids.Add(1)
	o := &anthropicOut{
		id: fmt.Sprintf("msg_fake%06d", n), model: r.Model, stopReason: "end_turn",
		inTokens: 1 + len(r.Messages)*10,
	}
	if o.model == "" {
		o.model = "claude-fake"
	}
	o.blocks = []map[string]any{}
	if reply.Slow {
		// Only a non-streaming request reads this; a stream is paced by slow.
		o.blocks = append(o.blocks, map[string]any{"type": "text", "text": SlowChunk})
		o.chunks = append(o.chunks, []string{SlowChunk})
		return o
	}
	if r.thinking() {
		o.blocks = append(o.blocks, map[string]any{"type": "thinking", "thinking": AnthropicThinking, "signature": anthropicSignature})
		o.chunks = append(o.chunks, Chunks(AnthropicThinking))
	}
	if reply.Text != "" {
		o.blocks = append(o.blocks, map[string]any{"type": "text", "text": reply.Text})
		o.chunks = append(o.chunks, Chunks(reply.Text))
	}
	if t := reply.Tool; t != nil {
		var input map[string]any
		switch t.Kind {
		case "write":
			path := t.Path
			if cwd := r.cwd(); cwd != "" && !strings.HasPrefix(path, "/") {
				path = cwd + "/" + path
			}
			input = map[string]any{"file_path": path, "content": t.Content}
		case "shell":
			input = map[string]any{"command": t.Command, "description": "Write " + t.Path}
		case "plan":
			todos := make([]map[string]any, len(t.Plan))
			for i, st := range t.Plan {
				todos[i] = map[string]any{"content": st.Content, "status": st.Status, "activeForm": st.Content}
			}
			input = map[string]any{"todos": todos}
		}
		js, _ := json.Marshal(input)
		o.blocks = append(o.blocks, map[string]any{
			"type": "tool_use", "id": fmt.Sprintf("%s%06d", ToolIDPrefix, n), "name": r.tool(t.Kind), "input": input,
		})
		// The input comes in two pieces, as the real API splits it, so a
		// client that only handles one delta per block shows up in tests.
		half := len(js) / 2
		o.chunks = append(o.chunks, []string{string(js[:half]), string(js[half:])})
		o.stopReason = "tool_use"
	}
	return o
}

// anthropicSignature stands in for the opaque signature of a thinking block;
// Claude Code only hands it back.
const anthropicSignature = "ZmFrZS1zaWduYXR1cmU="

// stream writes the answer as the API's server-sent events.
func (a *anthropicAPI) stream(w http.ResponseWriter, req *http.Request, o *anthropicOut, slow bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	send := func(event string, data map[string]any) bool {
		data["type"] = event
		js, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, js); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	start := map[string]any{
		"id": o.id, "type": "message", "role": "assistant", "model": o.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": o.usage(1),
	}
	if !send("message_start", map[string]any{"message": start}) || !send("ping", map[string]any{}) {
		return
	}
	if slow {
		a.slow(req, send)
		return
	}
	for i, b := range o.blocks {
		open := map[string]any{"type": b["type"]}
		var delta func(string) map[string]any
		switch b["type"] {
		case "thinking":
			open["thinking"], open["signature"] = "", ""
			delta = func(s string) map[string]any { return map[string]any{"type": "thinking_delta", "thinking": s} }
		case "text":
			open["text"] = ""
			delta = func(s string) map[string]any { return map[string]any{"type": "text_delta", "text": s} }
		case "tool_use":
			open["id"], open["name"], open["input"] = b["id"], b["name"], map[string]any{}
			delta = func(s string) map[string]any { return map[string]any{"type": "input_json_delta", "partial_json": s} }
		}
		if !send("content_block_start", map[string]any{"index": i, "content_block": open}) {
			return
		}
		for _, c := range o.chunks[i] {
			if !send("content_block_delta", map[string]any{"index": i, "delta": delta(c)}) {
				return
			}
		}
		if b["type"] == "thinking" {
			sig := map[string]any{"type": "signature_delta", "signature": anthropicSignature}
			if !send("content_block_delta", map[string]any{"index": i, "delta": sig}) {
				return
			}
		}
		if !send("content_block_stop", map[string]any{"index": i}) {
			return
		}
	}
	if !send("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": o.stopReason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": o.outTokens()},
	}) {
		return
	}
	send("message_stop", map[string]any{})
}

// slow streams one text block a SlowChunk at a time until the client goes
// away (a cancel closes the connection) or anthropicSlowFor has passed; it
// never finishes the message, since a finished one would end the turn.
func (a *anthropicAPI) slow(req *http.Request, send func(string, map[string]any) bool) {
	if !send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
		return
	}
	tick := time.NewTicker(anthropicSlowInterval)
	defer tick.Stop()
	limit := time.NewTimer(anthropicSlowFor)
	defer limit.Stop()
	for {
		delta := map[string]any{"type": "text_delta", "text": SlowChunk}
		if !send("content_block_delta", map[string]any{"index": 0, "delta": delta}) {
			return
		}
		select {
		case <-req.Context().Done():
			return
		case <-limit.C:
			return
		case <-tick.C:
		}
	}
}

func (a *anthropicAPI) countTokens(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, anthropicBodyLimit))
	a.script.Record(Request{API: "anthropic", Path: req.URL.Path, Body: body, Side: true})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"input_tokens": 1 + len(body)/4})
}

// models lists no model: Claude Code falls back to its built-in list.
func (a *anthropicAPI) models(w http.ResponseWriter, req *http.Request) {
	a.script.Record(Request{API: "anthropic", Path: req.URL.Path, Side: true})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": []any{}, "has_more": false, "first_id": nil, "last_id": nil})
}

func (a *anthropicAPI) other(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, anthropicBodyLimit))
	a.script.Record(Request{API: "anthropic", Path: req.URL.Path, Body: body, Side: true})
	anthropicError(w, http.StatusNotFound, "not_found_error", "the fake model does not serve "+req.URL.Path)
}

// anthropicError answers in the API's error shape, which Claude Code shows
// as the message of the failed request.
func anthropicError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "error", "error": map[string]any{"type": kind, "message": msg},
	})
}
