package metrics

import (
	"cmp"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// WebhookBacklog is one endpoint's backlog on this node.
type WebhookBacklog struct {
	Endpoint string
	Lag      uint64        // events beyond its cursors, up to the logs' heads
	Oldest   time.Duration // age of the oldest event not delivered yet; 0 when none waits
}

// WebhookAttempt records one attempt of a delivery (internal/webhook's observer).
func (m *Metrics) WebhookAttempt(endpoint string, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.counter("sparkles_webhook_deliveries_total", "endpoint", endpoint, "result", result).Inc()
}

// SetWebhookBacklog makes every scrape report what backlog answers.
func (m *Metrics) SetWebhookBacklog(backlog func() []WebhookBacklog) {
	m.webhookBacklog.mu.Lock()
	m.webhookBacklog.fn = backlog
	m.webhookBacklog.mu.Unlock()
}

// webhookBacklog reads the backlog at each scrape, so deleted endpoints
// leave no series behind.
type webhookBacklog struct {
	mu sync.Mutex
	fn func() []WebhookBacklog
}

// write writes the two backlog gauges of every endpoint, each family
// after its # HELP and # TYPE lines.
func (c *webhookBacklog) write(w io.Writer) {
	c.mu.Lock()
	fn := c.fn
	c.mu.Unlock()
	if fn == nil {
		return
	}
	bs := fn()
	if len(bs) == 0 {
		return
	}
	slices.SortFunc(bs, func(a, b WebhookBacklog) int { return cmp.Compare(a.Endpoint, b.Endpoint) })
	for _, f := range []struct {
		family string
		value  func(WebhookBacklog) string
	}{
		{"sparkles_webhook_lag_events", func(b WebhookBacklog) string { return strconv.FormatUint(b.Lag, 10) }},
		{"sparkles_webhook_oldest_undelivered_seconds", func(b WebhookBacklog) string {
			return strconv.FormatFloat(b.Oldest.Seconds(), 'g', -1, 64)
		}},
	} {
		_, _ = io.WriteString(w, "# HELP "+f.family+"\n# TYPE "+f.family+" gauge\n")
		for _, b := range bs {
			_, _ = io.WriteString(w, labelled(f.family, "endpoint", b.Endpoint)+" "+f.value(b)+"\n")
		}
	}
}
