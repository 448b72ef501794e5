// Package agentsuite describes the real ACP adapters that the conformance
// suite runs (Claude Code, Codex, Gemini CLI), pinned, each with the fake
// model API it is pointed at and what a sandbox of it needs. A new adapter is
// one more Adapter value.
package agentsuite

import (
	"net/http"
	"os"
	"path/filepath"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
)

// Adapter is one real agent as the suite runs it.
type Adapter struct {
	// Name is the agent's name in the server's registry (--agent NAME=…).
	Name string
	// Package is the npm package with its pinned version, as .ci/run
	// installs it; Bin is its executable under node_modules/.bin.
	Package string
	Bin     string
	Args    []string

	// Model returns the fake model API this adapter is pointed at.
	Model func(*fakemodel.Script) http.Handler

	// Setup prepares one sandbox of this agent: the env and secrets of its
	// create request, given the fake model's base URL (http://127.0.0.1:…)
	// and dir, a directory private to the test for config files (a HOME, a
	// CODEX_HOME…).
	Setup func(modelURL, dir string) (env, secrets map[string]string, err error)

	// Quirks are where the agent legitimately behaves differently from the
	// others; each is written down in the adapter table of docs/agents.md.
	Quirks Quirks

	// Sends says which optional ACP updates the adapter sends, and so
	// which events the scenarios expect of it.
	Sends Sends

	// Modes says which of the modes the adapter announces a scenario
	// switches to between turns.
	Modes Modes

	// Images: the adapter takes image blocks in a prompt
	// (promptCapabilities.image) and passes them to its model, whose
	// recorded request a scenario checks.
	Images bool
}

// Modes of an adapter, as it announces them in session/new.
type Modes struct {
	// Switch is a mode the adapter offers besides the one it starts in,
	// which a PATCH of the sandbox switches to and back; "" when it
	// announces no modes.
	Switch string
}

// Sends are the optional ACP session updates an adapter sends.
type Sends struct {
	// Plans: a "plan" update when the model calls its to-do tool
	// (fakemodel's "plan"), which the server shows as plan.updated.
	Plans bool
	// Usage: usage_update during a turn, which the server shows as
	// turn.usage.
	Usage bool
	// ToolOutput: what a shell command printed, in its tool call
	// updates' _meta (terminal_output, terminal_exit) to a client that
	// advertises it, which the server shows as tool.output.
	ToolOutput bool
}

// Quirks of an adapter that the scenarios allow for.
type Quirks struct {
	// ModelErrorStatus is the turn status when the model API answers 400:
	// "failed" when the adapter answers the prompt with an error, or
	// "succeeded" when it tells the error as text and ends the turn.
	ModelErrorStatus string
	// StaleAfterInterrupt: after a cancel or a model error, the agent
	// process answers its next prompt with what was left of the
	// interrupted one (claude-agent-acp 0.23.1 returns on the result
	// before Claude Code's closing message, which the next prompt then
	// reads). The suite restarts the server, and so the agent, after each
	// interrupted turn instead of running the next scenario on it.
	StaleAfterInterrupt bool
	// LoadFailsSameMinute: session/load cannot find a session made in the
	// same clock minute (Gemini CLI 0.61 answers -32603 "No previous
	// sessions found for this project."), so a boot that soon after opens
	// a new session and Sparkles logs session_lost.
	LoadFailsSameMinute bool
}

// Dir is where the pinned npm packages are installed: $SPARKLES_AGENTS_DIR,
// else ~/.cache/sparkles/agents (what .ci/run uses).
func Dir() string {
	if d := os.Getenv("SPARKLES_AGENTS_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sparkles", "agents")
}

// Command is the argv that runs the adapter from dir, and whether it is installed.
func (a Adapter) Command(dir string) ([]string, bool) {
	bin := filepath.Join(dir, "node_modules", ".bin", a.Bin)
	if _, err := os.Stat(bin); err != nil {
		return nil, false
	}
	return append([]string{bin}, a.Args...), true
}

// All is every adapter the suite runs.
func All() []Adapter { return adapters }

var adapters []Adapter

// register adds an adapter; each adapter's file calls it from init.
func register(a Adapter) { adapters = append(adapters, a) }
