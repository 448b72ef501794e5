package agentsuite

import (
	"os"
	"path/filepath"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
)

// ClaudeAPIKey is the key the Claude sandboxes get as a secret: the fake API
// ignores it, and a test can look for it to check redaction.
const ClaudeAPIKey = "sk-ant-api03-sparkles-fake-key-0123456789"

func init() {
	register(Adapter{
		Name:    "claude",
		Package: "@zed-industries/claude-agent-acp@0.23.1",
		Bin:     "claude-agent-acp",
		Model:   fakemodel.Anthropic,
		Setup:   claudeSetup,
		Quirks: Quirks{
			StaleAfterInterrupt: true,
			// A model error ends Claude Code's turn with an error result,
			// which the adapter answers as a JSON-RPC error (-32603).
			ModelErrorStatus: "failed",
		},
		// TodoWrite's todos become a plan; each result of Claude Code
		// (the turn's end) a usage_update with the session's cost in USD.
		Sends: Sends{Plans: true, Usage: true, ToolOutput: true},
		// configOptions of category mode: default, acceptEdits, plan…
		Modes: Modes{Switch: "plan"},
		// Images reach the Messages API as base64 image content blocks.
		Images: true,
	})
}

// claudeSetup gives the sandbox a private HOME (Claude Code keeps its
// settings, sessions and caches under ~/.claude and ~/.claude.json) and
// the switches that keep it from reaching anything but the fake API.
func claudeSetup(modelURL, dir string) (env, secrets map[string]string, err error) {
	home := filepath.Join(dir, "claude-home")
	plugins := filepath.Join(home, ".claude", "plugins")
	if err := os.MkdirAll(plugins, 0o700); err != nil {
		return nil, nil, err
	}
	// When it starts without a terminal, Claude Code fetches the plugin
	// blocklist from outside whatever the switches below say, unless its
	// cache says it was fetched less than an hour ago. A cache dated in the
	// future never goes stale.
	blocklist := []byte(`{"fetchedAt":"2999-01-01T00:00:00.000Z","plugins":[]}` + "\n")
	if err := os.WriteFile(filepath.Join(plugins, "blocklist.json"), blocklist, 0o600); err != nil {
		return nil, nil, err
	}
	env = map[string]string{
		"HOME":               home,
		"ANTHROPIC_BASE_URL": modelURL,
		// Off: update checks, feature flags, telemetry, error reports, the
		// MCP registry, release notes. Each of the three after it is implied
		// by this one; they are set too so that dropping one switch keeps the
		// others.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_ERROR_REPORTING":                  "1",
		// Off: the checks of how Claude Code was installed, which look for
		// a native install and warn about the npm one.
		"DISABLE_INSTALLATION_CHECKS": "1",
	}
	secrets = map[string]string{"ANTHROPIC_API_KEY": ClaudeAPIKey}
	return env, secrets, nil
}
