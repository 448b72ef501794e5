package cli

import (
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestUsageSummary: a turn.usage line says what the context holds, of what
// window, and the cost so far; turn.completed adds the cost to its tokens.
func TestUsageSummary(t *testing.T) {
	for _, tt := range []struct {
		u    sandbox.Usage
		want string
	}{
		{sandbox.Usage{ContextTokens: 53000, ContextWindow: 200000, Cost: &sandbox.Cost{Amount: 0.0123, Currency: "USD"}}, "context 53,000 of 200,000 tokens · 0.0123 USD"},
		{sandbox.Usage{ContextTokens: 1230}, "context 1,230 tokens"},
		{sandbox.Usage{Cost: &sandbox.Cost{Amount: 12.5, Currency: "EUR"}}, "12.50 EUR"},
		{sandbox.Usage{}, "no figures"},
	} {
		if got := summary(sandbox.Event{Type: sandbox.TypeTurnUsage, Data: &sandbox.TurnUsage{Usage: tt.u}}, 200); got != tt.want {
			t.Errorf("summary = %q, want %q", got, tt.want)
		}
	}
	done := &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, StopReason: sandbox.StopEndTurn, DurationMS: 1500,
		Usage: &sandbox.Usage{InputTokens: 3, OutputTokens: 40, TotalTokens: 43, Cost: &sandbox.Cost{Amount: 0.05, Currency: "USD"}}}
	if got, want := summary(sandbox.Event{Type: sandbox.TypeTurnCompleted, Data: done}, 200), "succeeded (end_turn) in 1.5s · 3 tokens in, 40 out · 0.0500 USD"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}
