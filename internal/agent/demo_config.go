package agent

import (
	"encoding/json"
	"fmt"
)

// The demo's modes and models, as it announces them in its answers to
// session/new and session/load (ACP modes and the unstable models); a new
// or loaded session starts in the first of each.
var (
	demoModes  = []Choice{{"default", "Default"}, {"plan", "Plan"}}
	demoModels = []Choice{{"demo-small", "Demo Small"}, {"demo-large", "Demo Large"}}
)

// sessionAnswer is the demo's answer to session/new and session/load: the
// session's id (none for a load) and its modes and models, which it
// resets to the first of each.
func (d *demo) sessionAnswer(sid string) map[string]any {
	d.mu.Lock()
	d.mode, d.model = demoModes[0].ID, demoModels[0].ID
	d.mu.Unlock()
	modes := make([]map[string]string, len(demoModes))
	for i, m := range demoModes {
		modes[i] = map[string]string{"id": m.ID, "name": m.Name, "description": m.Name + " mode"}
	}
	models := make([]map[string]string, len(demoModels))
	for i, m := range demoModels {
		models[i] = map[string]string{"modelId": m.ID, "name": m.Name}
	}
	a := map[string]any{
		"modes":  map[string]any{"currentModeId": demoModes[0].ID, "availableModes": modes},
		"models": map[string]any{"currentModelId": demoModels[0].ID, "availableModels": models},
	}
	if sid != "" {
		a["sessionId"] = sid
	}
	return a
}

// setConfig answers session/set_mode and session/set_model: an id it does
// not offer is invalid params, as ACP agents answer it.
func (d *demo) setConfig(m *message) error {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
		ModelID   string `json:"modelId"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" || p.SessionID != d.sessionID() {
		return d.fail(m.ID, codeInvalidParams, "unknown session")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case m.Method == "session/set_mode" && hasChoice(demoModes, p.ModeID):
		d.mode = p.ModeID
	case m.Method == "session/set_model" && hasChoice(demoModels, p.ModelID):
		d.model = p.ModelID
	default:
		return d.fail(m.ID, codeInvalidParams, "no such mode or model")
	}
	return d.reply(m.ID, struct{}{})
}

// modeText tells the session's mode and model, for the word mode.
func (d *demo) modeText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprintf("Mode: %s. Model: %s.", d.mode, d.model)
}

// planMode switches the session to plan by itself, as an agent does that
// decides to plan first, and tells the client with current_mode_update.
func (t *demoTurn) planMode() error {
	t.d.mu.Lock()
	t.d.mode = "plan"
	t.d.mu.Unlock()
	return t.d.notify(map[string]any{"sessionId": t.session, "update": map[string]any{
		"sessionUpdate": "current_mode_update", "currentModeId": "plan",
	}})
}
