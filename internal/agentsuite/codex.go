package agentsuite

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
)

// codexKeyVar names the variable the fake model provider reads its key
// from. It is none of the variables Codex treats as an OpenAI login, so no
// login path of Codex wakes up.
const codexKeyVar = "SPARKLES_FAKE_OPENAI_KEY"

func init() {
	register(Adapter{
		Name:    "codex",
		Package: "@zed-industries/codex-acp@0.16.0",
		Bin:     "codex-acp",
		Model:   fakemodel.NewOpenAI,
		Setup:   codexSetup,
		// A model API error ends session/prompt with a JSON-RPC error
		// (-32603, the API's body in data.message): the turn fails.
		Quirks: Quirks{ModelErrorStatus: "failed"},
		// update_plan's steps become a plan; each model call's token
		// count a usage_update, without a cost.
		Sends: Sends{Plans: true, Usage: true, ToolOutput: true},
		// ACP modes: read-only (where it starts), auto, full-access.
		Modes: Modes{Switch: "auto"},
	})
}

// codexSetup gives the sandbox a HOME and a CODEX_HOME of its own under dir,
// with a config.toml that points Codex at the fake model and switches off
// everything that would reach past loopback.
func codexSetup(modelURL, dir string) (env, secrets map[string]string, err error) {
	home := filepath.Join(dir, "home")
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig(modelURL)), 0o600); err != nil {
		return nil, nil, err
	}
	env = map[string]string{
		"HOME":       home,
		"CODEX_HOME": codexHome,
		// Anything that slips past the switches in config.toml and
		// honours the proxy variables lands on the fake model, which
		// records it as a side request and refuses it, instead of
		// trying the network.
		"HTTPS_PROXY": modelURL,
		"HTTP_PROXY":  modelURL,
		"ALL_PROXY":   modelURL,
		"NO_PROXY":    "127.0.0.1,localhost",
		// Codex's own log (its stderr, the sandbox's agent.log): warnings
		// and errors, without colour codes.
		"RUST_LOG": "warn",
		"NO_COLOR": "1",
	}
	// A fresh key per sandbox, shaped like a real one, so that a test
	// can look for it in everything the server says.
	secrets = map[string]string{codexKeyVar: "sk-fake-" + rand.Text()}
	return env, secrets, nil
}

// codexConfig is CODEX_HOME/config.toml for Codex 0.137 (what codex-acp
// 0.16.0 embeds). Codex ignores keys it does not know, so a setting that a
// later version renames goes silent: after a bump, check the features=[…]
// line Codex logs at info level for each turn.
func codexConfig(modelURL string) string {
	return fmt.Sprintf(`# Written by the Sparkles agent suite for one sandbox.

# A model the bundled catalog knows, so Codex offers the tools it gives
# that model (apply_patch as a freeform tool, exec_command) and prints no
# "unknown model" warning into the conversation.
model = "gpt-5.4-mini"
model_provider = "sparkles-fake"

# The read-only preset, codex-acp's mode for a workspace nobody trusted yet:
# edits ask, and commands ask when they need to leave the sandbox.
approval_policy = "on-request"
sandbox_mode = "read-only"

# Offline: no web search tool, no update check, no analytics or feedback
# upload, no telemetry exporters, credentials in files (no keyring).
web_search = "disabled"
check_for_update_on_startup = false
cli_auth_credentials_store = "file"
mcp_oauth_credentials_store = "file"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"

[history]
persistence = "none"

# Features that talk to hosted services (apps, plugins and their
# marketplaces, remote model lists, websockets) or ask a model on their
# own (auto-review, sub-agents, image generation, goals).
[features]
# Codex's Linux sandbox runs commands under bubblewrap, which the npm
# package does not ship and a machine may lack: then every sandboxed
# command dies at once (exit 101) and Codex never offers to run it
# outside. Landlock and seccomp need nothing but the kernel.
use_legacy_landlock = true
apps = false
plugins = false
remote_plugin = false
plugin_sharing = false
tool_suggest = false
remote_models = false
responses_websockets = false
responses_websockets_v2 = false
guardian_approval = false
multi_agent = false
image_generation = false
in_app_browser = false
browser_use = false
browser_use_external = false
computer_use = false
goals = false
workspace_dependencies = false
skill_mcp_dependency_install = false

[model_providers.sparkles-fake]
name = "Sparkles fake model"
base_url = %s
wire_api = "responses"
env_key = %q
# A failing request fails the turn at once; retries would only repeat the
# fake's answer.
request_max_retries = 0
stream_max_retries = 0
`, strconv.Quote(modelURL+"/v1"), codexKeyVar)
}
