package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	m.WebhookAttempts.WithLabelValues(endpoint, result).Inc()
}

// SetWebhookBacklog makes every scrape report what backlog answers.
func (m *Metrics) SetWebhookBacklog(backlog func() []WebhookBacklog) {
	m.webhookBacklog.mu.Lock()
	m.webhookBacklog.fn = backlog
	m.webhookBacklog.mu.Unlock()
}

var (
	webhookLagDesc = prometheus.NewDesc("sparkles_webhook_lag_events",
		"Events of the sandboxes this node delivers that lie beyond a webhook endpoint's cursors.", []string{"endpoint"}, nil)
	webhookOldestDesc = prometheus.NewDesc("sparkles_webhook_oldest_undelivered_seconds",
		"Age of the oldest event a webhook endpoint has not taken yet (0 when none waits).", []string{"endpoint"}, nil)
)

// webhookCollector reads the backlog at each scrape, so deleted endpoints
// leave no series behind.
type webhookCollector struct {
	mu sync.Mutex
	fn func() []WebhookBacklog
}

func (c *webhookCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- webhookLagDesc
	ch <- webhookOldestDesc
}

func (c *webhookCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fn := c.fn
	c.mu.Unlock()
	if fn == nil {
		return
	}
	for _, b := range fn() {
		ch <- prometheus.MustNewConstMetric(webhookLagDesc, prometheus.GaugeValue, float64(b.Lag), b.Endpoint)
		ch <- prometheus.MustNewConstMetric(webhookOldestDesc, prometheus.GaugeValue, b.Oldest.Seconds(), b.Endpoint)
	}
}
