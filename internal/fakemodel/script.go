// Package fakemodel serves stand-ins for the model APIs that real coding
// agents call (Anthropic Messages, OpenAI Responses, Gemini), on loopback, so
// that the agents' real adapters run end to end in tests with no model behind
// them and no network.
//
// Every API follows one Script: its server reduces a request to a
// Conversation (the user's last prompt and how many tool results follow it),
// asks the script for the Reply, and writes that reply in its own wire format,
// streamed. What the model does is chosen by words in the prompt:
//
//	write NAME   text, then a tool call that writes NAME in the working
//	             directory (content WriteContent); after the tool result, text
//	shell NAME   the same with a shell command that writes NAME
//	plan         text, then a call of the agent's to-do tool that sets the
//	             plan PlanSteps; after the tool result, text
//	slow         text streamed slowly, until the client goes away (for cancel)
//	fail         an HTTP 400 in the API's own error shape
//	anything     one short text answer
//
// Every request is recorded, so a test can check what the agent sent the
// model (for example that a later turn carries the earlier one).
package fakemodel

import (
	"regexp"
	"strings"
	"sync"
)

// WriteContent is what the model asks a write tool to put in a file.
const WriteContent = "hello from the fake model\n"

// Conversation is what the script needs of a request.
type Conversation struct {
	// Prompt is the text of the last user message that is not a tool result.
	Prompt string
	// ToolResults counts the tool results that came after Prompt.
	ToolResults int
}

// Reply is what the model answers.
type Reply struct {
	// Text is streamed in chunks of a few words, before Tool when both are set.
	Text string
	// Tool, when set, is a tool call the answer ends with.
	Tool *ToolCall
	// Slow streams text a chunk at a time, every SlowInterval, until the
	// client disconnects or SlowFor has passed.
	Slow bool
	// Fail is an HTTP status to answer with instead of a stream.
	Fail int
}

// ToolCall is a tool call of the model, in terms every API can express.
type ToolCall struct {
	Kind    string // "write", "shell" or "plan"
	Path    string // the file, relative to the agent's working directory
	Content string // write: the file's content
	Command string // shell: the command line
	Plan    []PlanStep
}

// PlanStep is one step of a plan the model sets; Status is pending,
// in_progress or completed, as every API's to-do tool spells it.
type PlanStep struct {
	Content string
	Status  string
}

// PlanSteps is the plan the model sets for "plan": one step of each status.
var PlanSteps = []PlanStep{
	{"Read the request", "completed"},
	{"Set the plan", "in_progress"},
	{"Report back", "pending"},
}

// Texts of the "plan" reply, before the tool call and after its result.
const (
	PlanBeforeText = "I will set a plan first."
	PlanAfterText  = "The plan is set."
)

// ToolIDPrefix starts every tool call id a fake model makes up, so that a
// test can check that no agent's own tool id reaches a public event.
const ToolIDPrefix = "fakecall"

// Texts the script answers with, so tests can compare what the agent showed.
const (
	PlainText = "Hello from the fake model."
	SlowChunk = "tick "
	FailText  = "the fake model refuses this request"
)

// BeforeText is the text that comes before a tool call on path.
func BeforeText(path string) string { return "I will create " + path + " now." }

// AfterText is the text that comes after the tool result for path.
func AfterText(path string) string { return "Finished with " + path + "." }

// ShellCommand is the command the model runs for "shell NAME": it writes
// the file, then prints ShellOutputLine and the value of ShellEchoVar, so
// that a test sees what a command printed, and a secret in it redacted.
func ShellCommand(path string) string {
	return "echo shell > " + path + "; echo " + ShellOutputLine + "; echo $" + ShellEchoVar
}

// ShellOutputLine and ShellEchoVar are what ShellCommand prints: a line
// and the value of a variable of the agent's environment.
const (
	ShellOutputLine = "visible-output-line"
	ShellEchoVar    = "CONFORMANCE_CANARY"
)

var (
	writeRe = regexp.MustCompile(`\bwrite ([A-Za-z0-9._-]+)`)
	shellRe = regexp.MustCompile(`\bshell ([A-Za-z0-9._-]+)`)
	planRe  = regexp.MustCompile(`\bplan\b`)
)

// Script decides the replies and records the requests. The zero value is
// ready to use; it is safe for concurrent use.
type Script struct {
	mu       sync.Mutex
	requests []Request
}

// Request is one request a fake model server received.
type Request struct {
	API  string // "anthropic", "openai" or "gemini"
	Path string
	Body []byte
	Conv Conversation
	Side bool // a side request (a title, a token count…), not a turn of the conversation
}

// Next returns the reply to a conversation.
func (s *Script) Next(c Conversation) Reply {
	p := c.Prompt
	switch {
	case strings.Contains(p, "fail"):
		return Reply{Fail: 400}
	case strings.Contains(p, "slow"):
		return Reply{Slow: true}
	}
	if m := writeRe.FindStringSubmatch(p); m != nil {
		if c.ToolResults == 0 {
			return Reply{Text: BeforeText(m[1]), Tool: &ToolCall{Kind: "write", Path: m[1], Content: WriteContent}}
		}
		return Reply{Text: AfterText(m[1])}
	}
	if m := shellRe.FindStringSubmatch(p); m != nil {
		if c.ToolResults == 0 {
			return Reply{Text: BeforeText(m[1]), Tool: &ToolCall{Kind: "shell", Path: m[1], Command: ShellCommand(m[1])}}
		}
		return Reply{Text: AfterText(m[1])}
	}
	if planRe.MatchString(p) {
		if c.ToolResults == 0 {
			return Reply{Text: PlanBeforeText, Tool: &ToolCall{Kind: "plan", Plan: PlanSteps}}
		}
		return Reply{Text: PlanAfterText}
	}
	return Reply{Text: PlainText}
}

// Record keeps a request; servers call it for every request they receive.
func (s *Script) Record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Body = append([]byte(nil), r.Body...)
	s.requests = append(s.requests, r)
}

// Requests returns a copy of every request recorded so far, in order.
func (s *Script) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Chunks splits text into the pieces a stream sends: a few words each, so a
// reply always comes as more than one chunk when it has several words.
func Chunks(text string) []string {
	var out []string
	words := strings.SplitAfter(text, " ")
	for i := 0; i < len(words); i += 2 {
		out = append(out, strings.Join(words[i:min(i+2, len(words))], ""))
	}
	return out
}
