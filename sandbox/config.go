package sandbox

import "slices"

// AgentConfig is the mode and the model a sandbox's agent works in, with
// the choices it announced (at most MaxConfigChoices of each). Mode and
// Model are what was asked for until the agent has announced its own; an
// empty list means the agent announced none (docs/api.md).
type AgentConfig struct {
	Mode   string         `json:"mode,omitempty"`
	Model  string         `json:"model,omitempty"`
	Modes  []ConfigChoice `json:"modes"`
	Models []ConfigChoice `json:"models"`
}

// ConfigChoice is one mode or model an agent offers.
type ConfigChoice struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Bounds of a curated AgentConfig.
const (
	MaxConfigChoices   = 50
	MaxConfigIDBytes   = 200
	MaxConfigNameBytes = 200
)

// SandboxUpdated is the data of sandbox.updated: the sandbox's agent
// config as it now is, which replaces the last.
type SandboxUpdated struct {
	Config AgentConfig `json:"config"`
}

// Clone returns a deep copy of the config; nil stays nil.
func (c *AgentConfig) Clone() *AgentConfig {
	if c == nil {
		return nil
	}
	out := *c
	out.Modes, out.Models = slices.Clone(c.Modes), slices.Clone(c.Models)
	return &out
}

// Has reports whether id is one of the choices.
func Has(choices []ConfigChoice, id string) bool {
	return slices.ContainsFunc(choices, func(c ConfigChoice) bool { return c.ID == id })
}

// ConfigChange is the mode and the model asked for, at create or by a
// PATCH of the sandbox; "" leaves one as it is.
type ConfigChange struct {
	Mode  string `json:"mode,omitempty"`
	Model string `json:"model,omitempty"`
}

// ErrConfigFailed is the sandbox.error code of a mode or a model asked for
// that the agent, when it booted, did not take: it does not offer it, or
// refused it. The sandbox goes on in the agent's own.
const ErrConfigFailed = "config_failed"
