package translate

import (
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Bounds of a curated plan: what a screen shows of an agent's to-do list.
const (
	MaxPlanEntries    = 100
	MaxPlanEntryChars = 500
)

// rawPlanEntry is an ACP PlanEntry.
type rawPlanEntry struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority"`
}

// plan curates an ACP plan update: the agent's whole to-do list, which
// replaces the last one. An unchanged list emits nothing. Like a tool
// call, it closes the message part before it.
func (t *Translator) plan(now time.Time, u *rawUpdate) []*sandbox.Event {
	var raw []rawPlanEntry
	if err := json.Unmarshal(u.Entries, &raw); err != nil {
		t.drop(DropMalformed)
		return nil
	}
	evs := t.closePart(now, nil)
	if len(raw) > MaxPlanEntries {
		t.drop(DropPlanEntries)
		raw = raw[:MaxPlanEntries]
	}
	entries := make([]sandbox.PlanEntry, len(raw))
	for i, r := range raw {
		entries[i] = sandbox.PlanEntry{
			Content:  t.boundChars(t.redact(r.Content), MaxPlanEntryChars),
			Status:   planStatus(r.Status),
			Priority: planPriority(r.Priority),
		}
	}
	if t.planSent && slices.Equal(entries, t.lastPlan) {
		return evs
	}
	t.planSent, t.lastPlan = true, entries
	return append(evs, t.event(now, sandbox.TypePlanUpdated, &sandbox.PlanUpdated{Entries: slices.Clone(entries)}))
}

// boundChars cuts s to at most n characters on a rune boundary, marking
// the cut, and redacts again what the cut may have split.
func (t *Translator) boundChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	out, _ := t.red.String(s[:i] + "…")
	return out
}

func planStatus(s string) string {
	switch s {
	case sandbox.PlanInProgress, sandbox.PlanCompleted:
		return s
	}
	return sandbox.PlanPending
}

func planPriority(s string) string {
	switch s {
	case sandbox.PriorityHigh, sandbox.PriorityLow:
		return s
	}
	return sandbox.PriorityMedium
}
