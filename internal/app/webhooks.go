package app

import (
	"context"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/metrics"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/server"
)

// newWebhooks makes the webhook loop over the store, when it keeps
// endpoints. On a store shared by several coordinators each delivers the
// sandboxes whose leases it holds (and claims those nobody holds that
// have events to deliver), so a takeover moves the deliveries with the
// sandbox and they resume from the durable cursors.
func (m *Main) newWebhooks(st Store, co *coordinator.Coordinator) *webhook.Loop {
	ws, ok := st.(webhook.Store)
	if !ok {
		return nil
	}
	cfg := webhook.Config{Store: ws, Log: st, Logger: m.Logger, Observer: m.Metrics, AllowPrivate: m.WebhookAllowPrivate,
		MinBackoff: m.WebhookMinBackoff, MaxBackoff: m.WebhookMaxBackoff}
	if m.Cluster != nil {
		cl := m.Cluster
		cfg.Holds = cl.Holds
		cfg.Claim = func(ctx context.Context, id string) (bool, error) {
			_, here, err := co.Holder(ctx, id)
			return here && err == nil, err
		}
	}
	l := webhook.New(cfg)
	m.Metrics.SetWebhookBacklog(func() []metrics.WebhookBacklog {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs := l.Gauges(ctx)
		out := make([]metrics.WebhookBacklog, len(gs))
		for i, g := range gs {
			out[i] = metrics.WebhookBacklog{Endpoint: g.Endpoint, Lag: g.Lag, Oldest: g.Oldest}
		}
		return out
	})
	return l
}

var (
	_ server.Webhooks = (*webhook.Loop)(nil)
	_ webhook.Store   = (*boltstore.Store)(nil)
	_ webhook.Store   = (*natsstore.Store)(nil)
)
