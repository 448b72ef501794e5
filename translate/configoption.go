package translate

import (
	"encoding/json"
	"errors"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// ConfigOption is a select option of an ACP session's configOptions as
// the agent announced it: raw, not yet curated. The agent's client reads
// it from session/new and session/load to set the option by its id; the
// Translator reads it from config_option_update.
type ConfigOption struct {
	// ID names the option to session/set_config_option.
	ID string
	// Current is the value chosen.
	Current string
	// Choices are the values offered, groups flattened, those without a
	// value left out: at most sandbox.MaxConfigChoices, the first ones.
	Choices []sandbox.ConfigChoice
	// Cut tells that the agent offered more than Choices holds.
	Cut bool
}

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

// ParseConfigOptions reads the mode and the model out of ACP
// configOptions: the first select option of category mode and the first
// of category model (or, for an option without a category, with those
// ids). A malformed option is skipped and the rest kept, as one of a
// type other than select is: one option's odd field must not hide the
// mode. The error is for configOptions that are not a list; mode and
// model are nil where the list has none.
func ParseConfigOptions(raw json.RawMessage) (mode, model *ConfigOption, err error) {
	var opts []json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil {
		return nil, nil, errors.New("configOptions is not a list")
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
		switch {
		case kind == "mode" && mode == nil:
			mode = o.parse()
		case kind == "model" && model == nil:
			model = o.parse()
		}
	}
	return mode, model, nil
}

func (o *rawConfigOption) parse() *ConfigOption {
	c := &ConfigOption{ID: o.ID, Current: o.CurrentValue}
	add := func(value, name string) {
		switch {
		case value == "":
		case len(c.Choices) == sandbox.MaxConfigChoices:
			c.Cut = true
		default:
			c.Choices = append(c.Choices, sandbox.ConfigChoice{ID: value, Name: name})
		}
	}
	for _, x := range o.Options {
		add(x.Value, x.Name)
		for _, y := range x.Options {
			add(y.Value, y.Name)
		}
	}
	return c
}
