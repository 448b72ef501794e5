package agent

import "strings"

// demoContextWindow is the context window the demo agent says it has.
const demoContextWindow = 200000

// sendUsage reports, when the prompt asked for it, the turn's usage so far
// as ACP agents report theirs (usage_update): the tokens in its context (the
// prompt's words and the chunks sent so far) and a cost of a hundredth of a
// cent each, so each report differs from the last.
func (t *demoTurn) sendUsage() error {
	if !t.plan.usage {
		return nil
	}
	used := len(strings.Fields(t.text)) + t.chunks
	return t.update(map[string]any{
		"sessionUpdate": "usage_update", "used": used, "size": demoContextWindow,
		"cost": map[string]any{"amount": float64(used) / 1e4, "currency": "USD"},
	})
}
