package sandbox_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Webhook resources write their times as every resource does, and the
// creation answer keeps its secret.
func TestWebhookJSON(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 5, 120_000_000, time.UTC)
	d := sandbox.WebhookDelivery{ID: "wh_1_sb_1_2", At: at, NextAttemptAt: &at}
	c := sandbox.CreatedWebhook{Webhook: sandbox.Webhook{ID: "wh_1", CreatedAt: at,
		Stats: sandbox.WebhookStats{OldestUndeliveredAt: &at, LastAttempt: &d}}, Secret: "whsec_x"}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if n := strings.Count(s, `"2026-12-05T10:00:05.120Z"`); n != 4 || !strings.Contains(s, `"secret":"whsec_x"`) {
		t.Fatalf("%s", s)
	}
	var back sandbox.CreatedWebhook
	if err := json.Unmarshal(b, &back); err != nil || back.Secret != "whsec_x" || !back.CreatedAt.Equal(at) || !back.Stats.LastAttempt.At.Equal(at) {
		t.Fatalf("decoded %+v, %v", back, err)
	}
}
