package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
const maxChoices = 50

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

// rawConfigOption is an ACP SessionConfigOption of type select; options
// are a flat list or a list of groups, each with its options.
type rawConfigOption struct {
	ID           string `json:"id"`
	Category     string `json:"category"`
	Type         string `json:"type"`
	CurrentValue string `json:"currentValue"`
	Options      []struct {
		Value   string `json:"value"`
		Name    string `json:"name"`
		Options []struct {
			Value string `json:"value"`
			Name  string `json:"name"`
		} `json:"options"`
	} `json:"options"`
}

// parseConfigOptions reads the mode and the model out of ACP
// configOptions: the select options of category mode and model (or with
// those ids when the agent gives no category). ok is false when the list
// has neither.
func parseConfigOptions(raw json.RawMessage) (mode, model *optionChoice, ok bool) {
	var opts []json.RawMessage
	if json.Unmarshal(raw, &opts) != nil {
		return nil, nil, false
	}
	for _, r := range opts {
		var o rawConfigOption
		if json.Unmarshal(r, &o) != nil || (o.Type != "" && o.Type != "select") {
			continue
		}
		kind := o.Category
		if kind == "" {
			kind = o.ID
		}
		oc := &optionChoice{Option: o.ID, Current: o.CurrentValue}
		for _, x := range o.Options {
			if x.Value != "" {
				oc.Choices = append(oc.Choices, Choice{ID: x.Value, Name: x.Name})
			}
			for _, y := range x.Options {
				oc.Choices = append(oc.Choices, Choice{ID: y.Value, Name: y.Name})
			}
		}
		if len(oc.Choices) > maxChoices {
			oc.Choices = oc.Choices[:maxChoices]
		}
		switch kind {
		case "mode":
			if mode == nil {
				mode = oc
			}
		case "model":
			if model == nil {
				model = oc
			}
		}
	}
	return mode, model, mode != nil || model != nil
}

// optionChoice is one select config option: its id, current value and
// choices.
type optionChoice struct {
	Option  string
	Current string
	Choices []Choice
}

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
	mode, model, _ := parseConfigOptions(a.ConfigOptions)
	if mode != nil {
		sc.Mode, sc.Modes, sc.modeOption = mode.Current, mode.Choices, mode.Option
	}
	if model != nil {
		sc.Model, sc.Models, sc.modelOption = model.Current, model.Choices, model.Option
	}
	return sc
}
