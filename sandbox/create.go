package sandbox

// CreateParams is the body of POST /v1/sandboxes. Every field is optional;
// the server's default agent runs when Agent is empty. Secrets reach the
// agent like Env, and their values are redacted from every event.
type CreateParams struct {
	Agent    string            `json:"agent,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Secrets  map[string]string `json:"secrets,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Source fills the workspace before the agent boots (a git
	// repository); a private one's token comes from Secrets["GIT_TOKEN"].
	Source *Source `json:"source,omitempty"`
	// MCPServers are given to the agent's sessions: stdio servers it runs
	// inside its confinement, http or sse ones it reaches. The values of
	// their Env and Headers are secrets, never answered.
	MCPServers []MCPServerConfig `json:"mcp_servers,omitempty"`
	// ToolOutput puts the output of the commands the agent runs in the
	// log (tool.output events); what a command prints then reaches the
	// log, redacted of the sandbox's secrets only.
	ToolOutput bool `json:"tool_output,omitempty"`
	// Config is the mode and the model the agent starts in, applied before
	// the first turn (docs/api.md, Agent config).
	Config *ConfigChange `json:"config,omitempty"`
}
