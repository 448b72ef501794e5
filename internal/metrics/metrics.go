// Package metrics holds the Prometheus series of a Sparkles server. The
// packages that do the work do not import Prometheus: each declares the small
// observer interface it needs, and *Metrics implements all of them.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is every series the server exports.
type Metrics struct {
	reg *prometheus.Registry

	Appends         prometheus.Counter
	CommitBatch     prometheus.Histogram
	CommitTime      prometheus.Histogram
	FsyncTime       prometheus.Histogram
	Subscribers     prometheus.Gauge
	Deliveries      prometheus.Counter
	Replays         prometheus.Counter
	DroppedUpdates  *prometheus.CounterVec
	Redactions      prometheus.Counter
	Pruned          prometheus.Counter
	Compacted       prometheus.Counter
	Turns           *prometheus.CounterVec
	Approvals       *prometheus.CounterVec
	SandboxesActive prometheus.Gauge
	StoreHealth     prometheus.Gauge
	AppendFailures  prometheus.Counter
	AppendRetries   prometheus.Counter
	Waiting         prometheus.Gauge
	// WebhookAttempts counts deliveries' attempts by endpoint and result
	// (ok, failed); the backlog gauges are read at each scrape from the
	// function SetWebhookBacklog gives.
	WebhookAttempts *prometheus.CounterVec
	webhookBacklog  webhookCollector
}

// New returns the series registered on a fresh registry, with the Go runtime
// and process collectors beside them.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{
		reg: reg,
		Appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_events_appended_total", Help: "Durable events appended to sandbox logs."}),
		CommitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sparkles_commit_batch_events", Help: "Events per group-commit transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		CommitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sparkles_commit_seconds", Help: "Time to commit and fsync one group-commit transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		FsyncTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sparkles_fsync_seconds", Help: "Time one group-commit transaction spent writing its pages and syncing the file (two fdatasyncs).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		Subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkles_stream_subscribers", Help: "Open SSE streams."}),
		Deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_stream_deliveries_total", Help: "Durable events written to SSE streams."}),
		Replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_stream_replays_total", Help: "SSE streams opened with a cursor (resume or replay)."}),
		DroppedUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sparkles_agent_updates_dropped_total", Help: "Raw agent updates that produced no event, by reason or kind."}, []string{"kind"}),
		Redactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_redactions_total", Help: "Secrets and token shapes replaced by [REDACTED]."}),
		Pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_events_pruned_total", Help: "Events removed by retention from the head of logs."}),
		Compacted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_events_compacted_total", Help: "Superseded message.updated events removed by compaction."}),
		Turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sparkles_turns_total", Help: "Completed turns by status."}, []string{"status"}),
		Approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sparkles_approvals_total", Help: "Resolved approvals by decision."}, []string{"decision"}),
		SandboxesActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkles_agents_running", Help: "Agent processes running."}),
		StoreHealth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkles_store_healthy", Help: "1 while the event store takes writes, 0 while it refuses them (disk full, unreachable)."}),
		AppendFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_store_append_failures_total", Help: "Writes the event store refused, each failed retry included."}),
		AppendRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkles_store_append_retries_total", Help: "Retries of appends that waited in memory for the event store."}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkles_events_waiting", Help: "Events held in memory until the event store takes them."}),
	}
	// A server starts with a store it has just opened; the first refusal
	// says otherwise.
	m.StoreHealth.Set(1)
	m.WebhookAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sparkles_webhook_deliveries_total", Help: "Attempts to deliver an event to a webhook endpoint, by endpoint and result (ok, failed)."},
		[]string{"endpoint", "result"})
	f(m.WebhookAttempts)
	f(&m.webhookBacklog)
	f(m.Appends)
	f(m.CommitBatch)
	f(m.CommitTime)
	f(m.FsyncTime)
	f(m.Subscribers)
	f(m.Deliveries)
	f(m.Replays)
	f(m.DroppedUpdates)
	f(m.Redactions)
	f(m.Pruned)
	f(m.Compacted)
	f(m.Turns)
	f(m.Approvals)
	f(m.SandboxesActive)
	f(m.StoreHealth)
	f(m.AppendFailures)
	f(m.AppendRetries)
	f(m.Waiting)
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the series in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Commit records one group commit (boltstore's observer).
func (m *Metrics) Commit(events int, took, sync time.Duration) {
	m.Appends.Add(float64(events))
	m.CommitBatch.Observe(float64(events))
	m.CommitTime.Observe(took.Seconds())
	if sync > 0 { // a store that cannot see its syncs says 0
		m.FsyncTime.Observe(sync.Seconds())
	}
}

// StreamOpened and StreamClosed count open SSE streams; replay tells whether
// the stream began from a cursor (server's observer).
func (m *Metrics) StreamOpened(replay bool) {
	m.Subscribers.Inc()
	if replay {
		m.Replays.Inc()
	}
}

// StreamClosed counts a stream that ended.
func (m *Metrics) StreamClosed() { m.Subscribers.Dec() }

// Delivered counts events written to a stream.
func (m *Metrics) Delivered(n int) { m.Deliveries.Add(float64(n)) }

// TurnCompleted counts a turn by its final status (coordinator's observer).
func (m *Metrics) TurnCompleted(status string) { m.Turns.WithLabelValues(status).Inc() }

// ApprovalResolved counts an approval by its decision.
func (m *Metrics) ApprovalResolved(decision string) { m.Approvals.WithLabelValues(decision).Inc() }

// UpdatesDropped counts raw agent updates that produced no event.
func (m *Metrics) UpdatesDropped(kind string, n int) {
	m.DroppedUpdates.WithLabelValues(kind).Add(float64(n))
}

// Redacted counts redactions.
func (m *Metrics) Redacted(n int) { m.Redactions.Add(float64(n)) }

// AgentsRunning moves the running-agents gauge.
func (m *Metrics) AgentsRunning(delta int) { m.SandboxesActive.Add(float64(delta)) }

// Retained records what one retention pass removed (retention's observer).
func (m *Metrics) Retained(pruned, compacted int) {
	m.Pruned.Add(float64(pruned))
	m.Compacted.Add(float64(compacted))
}

// StoreHealthy sets the store's health gauge (coordinator's observer).
func (m *Metrics) StoreHealthy(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.StoreHealth.Set(v)
}

// AppendFailed counts a write the store refused.
func (m *Metrics) AppendFailed() { m.AppendFailures.Inc() }

// AppendRetried counts a retry of a waiting append.
func (m *Metrics) AppendRetried() { m.AppendRetries.Inc() }

// EventsWaiting moves the gauge of events waiting for the store.
func (m *Metrics) EventsWaiting(delta int) { m.Waiting.Add(float64(delta)) }
