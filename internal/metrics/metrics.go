// Package metrics holds the Prometheus series of a Sparkles server. The
// packages that do the work do not import a metrics library: each declares
// the small observer interface it needs, and *Metrics implements all of them.
//
// The series are kept by github.com/VictoriaMetrics/metrics, which writes the
// Prometheus text format without the protobuf and client libraries of
// Prometheus' own Go client: those made up a third of the binary, which a
// start with a cold page cache reads nearly whole (BENCHMARKS.md, peer).
package metrics

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

func init() {
	// # HELP and # TYPE lines, which Prometheus reads the histograms by.
	vm.ExposeMetadata(true)
}

// help is each family's # HELP text.
var help = map[string]string{
	"sparkles_events_appended_total":              "Durable events appended to sandbox logs.",
	"sparkles_commit_batch_events":                "Events per group-commit transaction.",
	"sparkles_commit_seconds":                     "Time to commit and fsync one group-commit transaction.",
	"sparkles_fsync_seconds":                      "Time one group-commit transaction spent writing its pages and syncing the file (two fdatasyncs).",
	"sparkles_stream_subscribers":                 "Open SSE streams.",
	"sparkles_stream_deliveries_total":            "Durable events written to SSE streams.",
	"sparkles_stream_replays_total":               "SSE streams opened with a cursor (resume or replay).",
	"sparkles_agent_updates_dropped_total":        "Raw agent updates that produced no event, by reason or kind.",
	"sparkles_redactions_total":                   "Secrets and token shapes replaced by [REDACTED].",
	"sparkles_events_pruned_total":                "Events removed by retention from the head of logs.",
	"sparkles_events_compacted_total":             "Superseded message.updated events removed by compaction.",
	"sparkles_turns_total":                        "Completed turns by status.",
	"sparkles_approvals_total":                    "Resolved approvals by decision.",
	"sparkles_agents_running":                     "Agent processes running.",
	"sparkles_store_healthy":                      "1 while the event store takes writes, 0 while it refuses them (disk full, unreachable).",
	"sparkles_store_append_failures_total":        "Writes the event store refused, each failed retry included.",
	"sparkles_store_append_retries_total":         "Retries of appends that waited in memory for the event store.",
	"sparkles_events_waiting":                     "Events held in memory until the event store takes them.",
	"sparkles_webhook_deliveries_total":           "Attempts to deliver an event to a webhook endpoint, by endpoint and result (ok, failed).",
	"sparkles_webhook_lag_events":                 "Events of the sandboxes this node delivers that lie beyond a webhook endpoint's cursors.",
	"sparkles_webhook_oldest_undelivered_seconds": "Age of the oldest event a webhook endpoint has not taken yet (0 when none waits).",
}

// Metrics is every series the server exports.
type Metrics struct {
	set *vm.Set

	appends        *vm.Counter
	commitBatch    *vm.PrometheusHistogram
	commitTime     *vm.PrometheusHistogram
	fsyncTime      *vm.PrometheusHistogram
	subscribers    *vm.Gauge
	deliveries     *vm.Counter
	replays        *vm.Counter
	redactions     *vm.Counter
	pruned         *vm.Counter
	compacted      *vm.Counter
	agentsRunning  *vm.Gauge
	storeHealth    *vm.Gauge
	appendFailures *vm.Counter
	appendRetries  *vm.Counter
	waiting        *vm.Gauge
	webhookBacklog webhookBacklog
}

// New returns the series on a set of their own; the Go runtime's and the
// process's series are written beside them at each scrape.
func New() *Metrics {
	s := vm.NewSet()
	m := &Metrics{
		set:            s,
		appends:        s.NewCounter("sparkles_events_appended_total"),
		commitBatch:    s.NewPrometheusHistogramExt("sparkles_commit_batch_events", vm.ExponentialBuckets(1, 2, 12)),
		commitTime:     s.NewPrometheusHistogramExt("sparkles_commit_seconds", vm.ExponentialBuckets(0.0001, 2, 16)),
		fsyncTime:      s.NewPrometheusHistogramExt("sparkles_fsync_seconds", vm.ExponentialBuckets(0.0001, 2, 16)),
		subscribers:    s.NewGauge("sparkles_stream_subscribers", nil),
		deliveries:     s.NewCounter("sparkles_stream_deliveries_total"),
		replays:        s.NewCounter("sparkles_stream_replays_total"),
		redactions:     s.NewCounter("sparkles_redactions_total"),
		pruned:         s.NewCounter("sparkles_events_pruned_total"),
		compacted:      s.NewCounter("sparkles_events_compacted_total"),
		agentsRunning:  s.NewGauge("sparkles_agents_running", nil),
		storeHealth:    s.NewGauge("sparkles_store_healthy", nil),
		appendFailures: s.NewCounter("sparkles_store_append_failures_total"),
		appendRetries:  s.NewCounter("sparkles_store_append_retries_total"),
		waiting:        s.NewGauge("sparkles_events_waiting", nil),
	}
	// A server starts with a store it has just opened; the first refusal
	// says otherwise.
	m.storeHealth.Set(1)
	return m
}

// Handler serves the series in the Prometheus text format (version 0.0.4).
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		m.set.WritePrometheus(&b)
		m.webhookBacklog.write(&b)
		vm.WriteGoMetrics(&b)
		vm.WriteProcMetrics(&b)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = withHelp(w, &b)
	})
}

// withHelp copies the exposition in b to w with each family's # HELP text
// from help, which the library leaves empty.
func withHelp(w io.Writer, b *bytes.Buffer) error {
	out := bufio.NewWriter(w)
	for line := range strings.Lines(b.String()) {
		if name, ok := strings.CutPrefix(line, "# HELP "); ok {
			name = strings.TrimSpace(name)
			if text, ok := help[name]; ok {
				line = "# HELP " + name + " " + text + "\n"
			}
		}
		if _, err := out.WriteString(line); err != nil {
			return err
		}
	}
	return out.Flush()
}

// labelled names the series of family with the given label pairs, values
// escaped as the text format wants.
func labelled(family string, pairs ...string) string {
	var b strings.Builder
	b.WriteString(family)
	b.WriteByte('{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pairs[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(pairs[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// counter is the counter of family with the given labels, made at its
// first use.
func (m *Metrics) counter(family string, pairs ...string) *vm.Counter {
	return m.set.GetOrCreateCounter(labelled(family, pairs...))
}

// Commit records one group commit (boltstore's observer).
func (m *Metrics) Commit(events int, took, sync time.Duration) {
	m.appends.Add(events)
	m.commitBatch.Update(float64(events))
	m.commitTime.Update(took.Seconds())
	if sync > 0 { // a store that cannot see its syncs says 0
		m.fsyncTime.Update(sync.Seconds())
	}
}

// StreamOpened and StreamClosed count open SSE streams; replay tells whether
// the stream began from a cursor (server's observer).
func (m *Metrics) StreamOpened(replay bool) {
	m.subscribers.Inc()
	if replay {
		m.replays.Inc()
	}
}

// StreamClosed counts a stream that ended.
func (m *Metrics) StreamClosed() { m.subscribers.Dec() }

// Delivered counts events written to a stream.
func (m *Metrics) Delivered(n int) { m.deliveries.Add(n) }

// TurnCompleted counts a turn by its final status (coordinator's observer).
func (m *Metrics) TurnCompleted(status string) {
	m.counter("sparkles_turns_total", "status", status).Inc()
}

// ApprovalResolved counts an approval by its decision.
func (m *Metrics) ApprovalResolved(decision string) {
	m.counter("sparkles_approvals_total", "decision", decision).Inc()
}

// UpdatesDropped counts raw agent updates that produced no event.
func (m *Metrics) UpdatesDropped(kind string, n int) {
	m.counter("sparkles_agent_updates_dropped_total", "kind", kind).Add(n)
}

// Redacted counts redactions.
func (m *Metrics) Redacted(n int) { m.redactions.Add(n) }

// AgentsRunning moves the running-agents gauge.
func (m *Metrics) AgentsRunning(delta int) { m.agentsRunning.Add(float64(delta)) }

// Retained records what one retention pass removed (retention's observer).
func (m *Metrics) Retained(pruned, compacted int) {
	m.pruned.Add(pruned)
	m.compacted.Add(compacted)
}

// StoreHealthy sets the store's health gauge (coordinator's observer).
func (m *Metrics) StoreHealthy(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.storeHealth.Set(v)
}

// AppendFailed counts a write the store refused.
func (m *Metrics) AppendFailed() { m.appendFailures.Inc() }

// AppendRetried counts a retry of a waiting append.
func (m *Metrics) AppendRetried() { m.appendRetries.Inc() }

// EventsWaiting moves the gauge of events waiting for the store.
func (m *Metrics) EventsWaiting(delta int) { m.waiting.Add(float64(delta)) }
