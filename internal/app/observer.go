package app

import (
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/metrics"
	"github.com/sparkles-dev/sparkles/server"
)

// Observer is told of streams and deliveries (as server.Config's) and of
// turns, agents and the store's health (as coordinator.Config's).
type Observer interface {
	server.Observer
	coordinator.Observer
}

// observers tells the metrics, then the extra observer.
type observers struct {
	m     *metrics.Metrics
	extra Observer
}

func (o observers) StreamOpened(replay bool) { o.m.StreamOpened(replay); o.extra.StreamOpened(replay) }
func (o observers) StreamClosed()            { o.m.StreamClosed(); o.extra.StreamClosed() }
func (o observers) Delivered(n int)          { o.m.Delivered(n); o.extra.Delivered(n) }
func (o observers) TurnCompleted(status string) {
	o.m.TurnCompleted(status)
	o.extra.TurnCompleted(status)
}
func (o observers) ApprovalResolved(decision string) {
	o.m.ApprovalResolved(decision)
	o.extra.ApprovalResolved(decision)
}
func (o observers) UpdatesDropped(kind string, n int) {
	o.m.UpdatesDropped(kind, n)
	o.extra.UpdatesDropped(kind, n)
}
func (o observers) Redacted(n int)          { o.m.Redacted(n); o.extra.Redacted(n) }
func (o observers) AgentsRunning(delta int) { o.m.AgentsRunning(delta); o.extra.AgentsRunning(delta) }
func (o observers) StoreHealthy(ok bool)    { o.m.StoreHealthy(ok); o.extra.StoreHealthy(ok) }
func (o observers) AppendFailed()           { o.m.AppendFailed(); o.extra.AppendFailed() }
func (o observers) AppendRetried()          { o.m.AppendRetried(); o.extra.AppendRetried() }
func (o observers) EventsWaiting(delta int) { o.m.EventsWaiting(delta); o.extra.EventsWaiting(delta) }

// NopObserver is an Observer that does nothing: embed it to hear only some.
type NopObserver struct {
	coordinator.NopObserver
}

func (NopObserver) StreamOpened(bool) {}
func (NopObserver) StreamClosed()     {}
func (NopObserver) Delivered(int)     {}
