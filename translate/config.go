package translate

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// DropConfigChoices counts announced modes or models past
// sandbox.MaxConfigChoices.
const DropConfigChoices = "config_choices_over_50"

// configUpdate is an ACP current_mode_update or config_option_update.
type configUpdate struct {
	Update struct {
		SessionUpdate string          `json:"sessionUpdate"`
		CurrentModeID *string         `json:"currentModeId"`
		ConfigOptions json.RawMessage `json:"configOptions"`
	} `json:"update"`
}

// Config curates the agent config as the agent announced it (raw ids and
// names, the coordinator reads them from the session's answer or sets
// them) and returns its sandbox.updated, or nothing when it is the one
// last curated (see Known).
func (t *Translator) Config(raw sandbox.AgentConfig) []*sandbox.Event {
	c := sandbox.AgentConfig{
		Mode:   t.redactBounded(raw.Mode, sandbox.MaxConfigIDBytes),
		Model:  t.redactBounded(raw.Model, sandbox.MaxConfigIDBytes),
		Modes:  t.choices(raw.Modes),
		Models: t.choices(raw.Models),
	}
	return t.configChanged(t.now(), c)
}

// Known tells the translator the config the sandbox already shows, so
// that the same config announced again is no news.
func (t *Translator) Known(c *sandbox.AgentConfig) {
	t.config = c.Clone()
}

// CurrentConfig returns the config last curated or made known; nil before.
func (t *Translator) CurrentConfig() *sandbox.AgentConfig { return t.config.Clone() }

func (t *Translator) choices(raw []sandbox.ConfigChoice) []sandbox.ConfigChoice {
	if len(raw) > sandbox.MaxConfigChoices {
		t.drop(DropConfigChoices)
		raw = raw[:sandbox.MaxConfigChoices]
	}
	out := make([]sandbox.ConfigChoice, 0, len(raw))
	for _, r := range raw {
		if r.ID == "" {
			continue
		}
		out = append(out, sandbox.ConfigChoice{
			ID:   t.redactBounded(r.ID, sandbox.MaxConfigIDBytes),
			Name: t.redactBounded(r.Name, sandbox.MaxConfigNameBytes),
		})
	}
	return out
}

// optionChoices curates a config option's choices; those the parse cut
// count as dropped, as those past the bound of a list given to Config do.
func (t *Translator) optionChoices(o *ConfigOption) []sandbox.ConfigChoice {
	if o.Cut {
		t.drop(DropConfigChoices)
	}
	return t.choices(o.Choices)
}

func (t *Translator) configChanged(now time.Time, c sandbox.AgentConfig) []*sandbox.Event {
	if p := t.config; p != nil && p.Mode == c.Mode && p.Model == c.Model &&
		slices.Equal(p.Modes, c.Modes) && slices.Equal(p.Models, c.Models) {
		return nil
	}
	t.config = c.Clone()
	return []*sandbox.Event{t.event(now, sandbox.TypeSandboxUpdated, &sandbox.SandboxUpdated{Config: c})}
}

// isConfigUpdate tells a config update apart cheaply, for updates outside
// a turn, which are otherwise dropped unread.
func isConfigUpdate(params json.RawMessage) bool {
	return bytes.Contains(params, []byte(`current_mode_update`)) || bytes.Contains(params, []byte(`config_option_update`))
}

// configUpdate translates the agent's own change of its mode
// (current_mode_update) or of its config options (config_option_update,
// of which the mode and the model are read) into sandbox.updated, in a
// turn or outside one. It closes no message part: a mode is no step of a
// reply.
func (t *Translator) configUpdate(params json.RawMessage) []*sandbox.Event {
	var u configUpdate
	if json.Unmarshal(params, &u) != nil {
		t.drop(DropMalformed)
		return nil
	}
	c := sandbox.AgentConfig{}
	if p := t.config; p != nil {
		c = *p.Clone()
	}
	switch u.Update.SessionUpdate {
	case "current_mode_update":
		if u.Update.CurrentModeID == nil {
			t.drop(DropMalformed)
			return nil
		}
		c.Mode = t.redactBounded(*u.Update.CurrentModeID, sandbox.MaxConfigIDBytes)
	case "config_option_update":
		mode, model, err := ParseConfigOptions(u.Update.ConfigOptions)
		if err != nil {
			t.drop(DropMalformed)
			return nil
		}
		if mode == nil && model == nil {
			t.drop(u.Update.SessionUpdate)
			return nil
		}
		if mode != nil {
			c.Mode, c.Modes = t.redactBounded(mode.Current, sandbox.MaxConfigIDBytes), t.optionChoices(mode)
		}
		if model != nil {
			c.Model, c.Models = t.redactBounded(model.Current, sandbox.MaxConfigIDBytes), t.optionChoices(model)
		}
	default:
		// Outside a turn, text that only names one.
		t.drop(DropOutsideTurn)
		return nil
	}
	return t.configChanged(t.now(), c)
}
