package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// Choice is one mode or model an agent offers: its id and its name, as the
// agent sent them (the caller curates both before they leave).
type Choice struct {
	ID   string
	Name string
}

// SessionConfig is the mode and the model of the open session and the
// choices the agent announced in its answer to session/new or
// session/load: ACP modes (SessionModeState), the unstable models
// (SessionModelState) or the newer configOptions of category mode and
// model, the last winning. Raw: the caller curates it.
type SessionConfig struct {
	Mode, Model   string
	Modes, Models []Choice

	// modeOption and modelOption are the ids of the config options that
	// set them, when the agent announced configOptions: then those are
	// set with session/set_config_option, else with session/set_mode and
	// session/set_model.
	modeOption, modelOption string
}

// maxChoices bounds the choices kept of each list: an agent announcing
// thousands of models must not bloat every event that repeats them.
// configOptions are cut to the same bound as they are parsed.
const maxChoices = sandbox.MaxConfigChoices

// SessionConfig answers the session's mode and model as the agent last
// announced them, with those this client set since.
func (c *Conn) SessionConfig() SessionConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.sessionCfg
	sc.Modes, sc.Models = slices.Clone(sc.Modes), slices.Clone(sc.Models)
	return sc
}

// setSessionConfig keeps what the answer to session/new or session/load
// announced. An answer without any (or of the wrong shape) leaves none.
func (c *Conn) setSessionConfig(answer json.RawMessage) {
	sc := parseSessionConfig(answer)
	c.mu.Lock()
	c.sessionCfg = sc
	c.mu.Unlock()
}

// ChoiceError is a mode or a model the agent does not offer.
type ChoiceError struct {
	What    string // "mode" or "model"
	ID      string
	Choices []Choice
}

func (e *ChoiceError) Error() string {
	if len(e.Choices) == 0 {
		return fmt.Sprintf("the agent offers no %ss", e.What)
	}
	ids := make([]string, len(e.Choices))
	for i, ch := range e.Choices {
		ids[i] = ch.ID
	}
	return fmt.Sprintf("the agent offers no %s %q: it offers %s", e.What, e.ID, strings.Join(ids, ", "))
}

// SetMode switches the session to the mode id, one the agent announced,
// through session/set_config_option when the agent offers a mode option,
// else session/set_mode. An agent's refusal is an *RPCError.
func (c *Conn) SetMode(ctx context.Context, id string) error {
	sc := c.SessionConfig()
	if !hasChoice(sc.Modes, id) {
		return &ChoiceError{What: "mode", ID: id, Choices: sc.Modes}
	}
	var err error
	if sc.modeOption != "" {
		err = c.setOption(ctx, sc.modeOption, id)
	} else {
		_, err = c.call(ctx, "session/set_mode", setModeParams{SessionID: c.sessionID(), ModeID: id})
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sessionCfg.Mode = id
	c.mu.Unlock()
	return nil
}

// SetModel switches the session to the model id, one the agent announced,
// through session/set_config_option when the agent offers a model option,
// else the unstable session/set_model.
func (c *Conn) SetModel(ctx context.Context, id string) error {
	sc := c.SessionConfig()
	if !hasChoice(sc.Models, id) {
		return &ChoiceError{What: "model", ID: id, Choices: sc.Models}
	}
	var err error
	if sc.modelOption != "" {
		err = c.setOption(ctx, sc.modelOption, id)
	} else {
		_, err = c.call(ctx, "session/set_model", setModelParams{SessionID: c.sessionID(), ModelID: id})
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sessionCfg.Model = id
	c.mu.Unlock()
	return nil
}

func (c *Conn) setOption(ctx context.Context, option, value string) error {
	_, err := c.call(ctx, "session/set_config_option", setConfigOptionParams{SessionID: c.sessionID(), ConfigID: option, Value: value})
	return err
}

func hasChoice(list []Choice, id string) bool {
	return slices.ContainsFunc(list, func(c Choice) bool { return c.ID == id })
}

type (
	setModeParams struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	setModelParams struct {
		SessionID string `json:"sessionId"`
		ModelID   string `json:"modelId"`
	}
	setConfigOptionParams struct {
		SessionID string `json:"sessionId"`
		ConfigID  string `json:"configId"`
		Value     string `json:"value"`
	}
)

// parseSessionConfig reads an answer to session/new or session/load.
func parseSessionConfig(answer json.RawMessage) SessionConfig {
	var a struct {
		Modes *struct {
			CurrentModeID  string `json:"currentModeId"`
			AvailableModes []struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"availableModes"`
		} `json:"modes"`
		Models *struct {
			CurrentModelID  string `json:"currentModelId"`
			AvailableModels []struct {
				ModelID string `json:"modelId"`
				Name    string `json:"name"`
			} `json:"availableModels"`
		} `json:"models"`
		ConfigOptions json.RawMessage `json:"configOptions"`
	}
	var sc SessionConfig
	if json.Unmarshal(answer, &a) != nil {
		return sc
	}
	if m := a.Modes; m != nil {
		sc.Mode = m.CurrentModeID
		for _, x := range m.AvailableModes {
			if x.ID != "" && len(sc.Modes) < maxChoices {
				sc.Modes = append(sc.Modes, Choice{ID: x.ID, Name: x.Name})
			}
		}
	}
	if m := a.Models; m != nil {
		sc.Model = m.CurrentModelID
		for _, x := range m.AvailableModels {
			if x.ModelID != "" && len(sc.Models) < maxChoices {
				sc.Models = append(sc.Models, Choice{ID: x.ModelID, Name: x.Name})
			}
		}
	}
	mode, model, _ := translate.ParseConfigOptions(a.ConfigOptions)
	if mode != nil {
		sc.Mode, sc.Modes, sc.modeOption = mode.Current, choicesOf(mode.Choices), mode.ID
	}
	if model != nil {
		sc.Model, sc.Models, sc.modelOption = model.Current, choicesOf(model.Choices), model.ID
	}
	return sc
}

func choicesOf(cs []sandbox.ConfigChoice) []Choice {
	var out []Choice
	for _, c := range cs {
		out = append(out, Choice{ID: c.ID, Name: c.Name})
	}
	return out
}
