package agentsuite

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/sparkles-dev/sparkles/internal/fakemodel"
)

// Gemini CLI speaks ACP itself with --acp (0.61 still takes the older
// --experimental-acp, deprecated). gemini.md says what it sends and why
// each setting is there.
func init() {
	register(Adapter{
		Name:    "gemini",
		Package: "@google/gemini-cli@0.61.0",
		Bin:     "gemini",
		Args:    []string{"--acp"},
		Model:   fakemodel.Gemini,
		Setup:   geminiSetup,
		Quirks: Quirks{
			// A 400 from the model API is answered to session/prompt as a
			// JSON-RPC error (code 400, the API's error body as message),
			// at once: the CLI retries only 429 and 5xx.
			ModelErrorStatus:    "failed",
			LoadFailsSameMinute: true,
		},
		// Gemini CLI 0.61 sends neither a plan (its write_todos tool
		// runs, after an approval, but its ACP side sends no plan
		// update) nor usage_update.
		Sends: Sends{},
		// ACP modes: default, autoEdit, yolo (and plan when enabled).
		Modes: Modes{Switch: "autoEdit"},
	})
}

// GeminiAPIKey is the key the sandbox is given as a secret: the fake API
// accepts any, and a test can look for it in events.
const GeminiAPIKey = "fake-gemini-key-3b8e41c0d9"

// geminiSettings is ~/.gemini/settings.json: everything that would reach
// past loopback is off, the key comes from the environment, and tools ask
// before they write or run (the default approval mode).
var geminiSettings = map[string]any{
	"general": map[string]any{
		"enableAutoUpdate":             false,
		"enableAutoUpdateNotification": false,
		"defaultApprovalMode":          "default",
		// A failed fetch is a loopback server gone: retrying only delays
		// the error.
		"retryFetchErrors": false,
		"checkpointing":    map[string]any{"enabled": false},
	},
	"privacy":   map[string]any{"usageStatisticsEnabled": false},
	"telemetry": map[string]any{"enabled": false, "logPrompts": false},
	"ide":       map[string]any{"enabled": false, "hasSeenNudge": true},
	"security": map[string]any{
		// The API key of the environment, not a Google login (OAuth).
		"auth": map[string]any{"selectedType": "gemini-api-key"},
		// No trust prompt for the sandbox directory, which is new each time.
		"folderTrust": map[string]any{"enabled": false},
	},
	"model": map[string]any{
		// A fixed model: "auto" asks a classifier model before every prompt.
		"name": "gemini-2.5-pro",
		// The fake's slow reply repeats one chunk by design; the loop
		// detector would cut it after about ten seconds and start a turn of
		// its own ("System: Potential loop detected…").
		"disableLoopDetection": true,
	},
	// Without a ripgrep on PATH the CLI would download one.
	"tools": map[string]any{"useRipgrep": false},
}

// geminiSetup writes the settings into a private HOME under dir and points
// the CLI at the fake API.
func geminiSetup(modelURL, dir string) (env, secrets map[string]string, err error) {
	home := filepath.Join(dir, "gemini-home")
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		return nil, nil, err
	}
	b, err := json.MarshalIndent(geminiSettings, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), b, 0o600); err != nil {
		return nil, nil, err
	}
	env = map[string]string{
		"HOME": home,
		// @google/genai's base URL for the Gemini API (not Vertex).
		"GOOGLE_GEMINI_BASE_URL": modelURL,
		// Else the CLI respawns itself to raise Node's heap limit to half
		// the machine's memory, and the parent, which ignores SIGTERM,
		// waits: two Node processes per sandbox instead of one.
		"GEMINI_CLI_NO_RELAUNCH": "true",
	}
	return env, map[string]string{"GEMINI_API_KEY": GeminiAPIKey}, nil
}
