package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape serves m's exposition once and parses it as Prometheus does.
func scrape(t *testing.T, m *Metrics) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, body)
	}
	return fams, string(body)
}

func TestExposition(t *testing.T) {
	m := New()
	m.Commit(3, 2*time.Millisecond, time.Millisecond)
	m.Commit(5, 300*time.Microsecond, 0)
	m.StreamOpened(true)
	m.StreamOpened(false)
	m.StreamClosed()
	m.TurnCompleted("completed")
	m.TurnCompleted("completed")
	m.TurnCompleted("failed")
	m.UpdatesDropped(`odd "kind"\`+"\n", 2)
	m.AgentsRunning(2)
	m.AgentsRunning(-1)
	m.StoreHealthy(false)
	m.WebhookAttempt("wh_1", true)
	m.WebhookAttempt("wh_1", false)
	m.SetWebhookBacklog(func() []WebhookBacklog {
		return []WebhookBacklog{{Endpoint: "wh_2", Lag: 7, Oldest: 1500 * time.Millisecond}, {Endpoint: "wh_1"}}
	})
	fams, body := scrape(t, m)

	value := func(family string, labels map[string]string) float64 {
		t.Helper()
		f := fams[family]
		if f == nil {
			t.Fatalf("no family %s in\n%s", family, body)
		}
	next:
		for _, s := range f.Metric {
			for _, l := range s.Label {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			if len(s.Label) != len(labels) {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.Counter.GetValue()
			case dto.MetricType_GAUGE:
				return s.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(s.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("no series %s%v in\n%s", family, labels, body)
		return 0
	}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"sparkles_events_appended_total", nil, 8},
		{"sparkles_commit_batch_events", nil, 2},
		{"sparkles_commit_seconds", nil, 2},
		{"sparkles_fsync_seconds", nil, 1}, // a store that cannot see its syncs says 0
		{"sparkles_stream_subscribers", nil, 1},
		{"sparkles_stream_replays_total", nil, 1},
		{"sparkles_turns_total", map[string]string{"status": "completed"}, 2},
		{"sparkles_turns_total", map[string]string{"status": "failed"}, 1},
		{"sparkles_agent_updates_dropped_total", map[string]string{"kind": `odd "kind"\` + "\n"}, 2},
		{"sparkles_agents_running", nil, 1},
		{"sparkles_store_healthy", nil, 0},
		{"sparkles_webhook_deliveries_total", map[string]string{"endpoint": "wh_1", "result": "ok"}, 1},
		{"sparkles_webhook_deliveries_total", map[string]string{"endpoint": "wh_1", "result": "failed"}, 1},
		{"sparkles_webhook_lag_events", map[string]string{"endpoint": "wh_2"}, 7},
		{"sparkles_webhook_oldest_undelivered_seconds", map[string]string{"endpoint": "wh_2"}, 1.5},
		{"sparkles_webhook_lag_events", map[string]string{"endpoint": "wh_1"}, 0},
	} {
		if got := value(c.family, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	// Every family of the server's says what it is; the histograms are
	// typed as such, which histogram_quantile needs.
	for name, f := range fams {
		if !strings.HasPrefix(name, "sparkles_") {
			continue
		}
		if f.GetHelp() == "" || f.GetHelp() != help[name] {
			t.Errorf("%s: help %q, want %q", name, f.GetHelp(), help[name])
		}
	}
	for _, h := range []string{"sparkles_commit_batch_events", "sparkles_commit_seconds", "sparkles_fsync_seconds"} {
		if fams[h].GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is a %v, want a histogram", h, fams[h].GetType())
		}
	}
	// The process and the Go runtime are described beside them.
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}

// A deleted endpoint leaves no backlog series behind: the gauges are read
// at each scrape.
func TestWebhookBacklogFollowsEndpoints(t *testing.T) {
	m := New()
	backlog := []WebhookBacklog{{Endpoint: "wh_1", Lag: 3}}
	m.SetWebhookBacklog(func() []WebhookBacklog { return backlog })
	if fams, body := scrape(t, m); fams["sparkles_webhook_lag_events"] == nil {
		t.Fatalf("no backlog series:\n%s", body)
	}
	backlog = nil
	if fams, body := scrape(t, m); fams["sparkles_webhook_lag_events"] != nil {
		t.Fatalf("a backlog series outlived its endpoint:\n%s", body)
	}
}
