package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// local is the server sparkles serve runs (app.Main) on a data dir of its
// own, without the retention loop (a scenario fills one log far past its
// limits) and with agents unconfined (a boot is timed as the agent's own;
// the confined boot has its own benchmark in internal/confine). Events come
// in through AppendEvents, the path the agent runtime takes.
type local struct {
	main    *app.Main
	store   *boltstore.Store
	path    string // the store's file
	coord   *coordinator.Coordinator
	streams *observer
	addr    string
	token   string
}

// observer counts open streams and deliveries, which the child reports to
// the parent, and tells the agents scenario how many agents run.
type observer struct {
	app.NopObserver
	open      atomic.Int64
	delivered atomic.Int64
	writes    atomic.Int64 // batches of deliveries, each one write to a stream
	agents    *benchAgents // nil without agents
}

func (o *observer) StreamOpened(bool) { o.open.Add(1) }
func (o *observer) StreamClosed()     { o.open.Add(-1) }
func (o *observer) Delivered(n int) {
	o.delivered.Add(int64(n))
	o.writes.Add(1)
}

func (o *observer) AgentsRunning(delta int) {
	if o.agents != nil {
		o.agents.AgentsRunning(delta)
	}
}

func startLocal(dir string, logger *slog.Logger, agents *benchAgents) (*local, error) {
	obs := &observer{agents: agents}
	m := &app.Main{
		Addr:        "127.0.0.1:0",
		DataDir:     dir,
		Token:       newToken(),
		Logger:      logger,
		NoRetention: true,
		Isolation:   "off",
		Observer:    obs,
		// The webhooks scenario's receiver is on loopback: serve's
		// --webhook-allow-private.
		WebhookAllowPrivate: os.Getenv(EnvChildWebhooks) != "",
	}
	if agents != nil {
		agents.configure(m)
	}
	if err := m.Run(context.Background()); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return &local{
		main:    m,
		store:   m.Store.(*boltstore.Store),
		path:    datadir.Dir(dir).Store(),
		coord:   m.Coordinator,
		streams: obs,
		addr:    m.Listener.Addr().String(),
		token:   m.Token,
	}, nil
}

// close stops in the order serve does: streams and HTTP, then the
// coordinator, then the store.
func (l *local) close() error { return l.main.Close() }

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "spk_bench_" + hex.EncodeToString(b)
}

// createSandboxes creates n sandboxes, a few at a time so their creates
// share commits as a busy server's would.
func createSandboxes(ctx context.Context, co *coordinator.Coordinator, n int) ([]string, error) {
	ids := make([]string, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		sb, err := co.CreateSandbox(ctx, sandbox.CreateParams{})
		ids[i] = sb.ID
		return err
	})
	return ids, err
}

// parallel runs fn(0..n-1) on at most width goroutines and returns the
// first error; the others see their context canceled.
func parallel(ctx context.Context, n, width int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// partIDs and the message id are fixed: every benchmark event overwrites
// the same part, so the sandbox's state stays one part long however many
// events are appended, as a streaming reply's does.
const (
	benchMessageID = "msg_01jx4d9a1b2c3d4e5f6g7h8j9k"
	benchPartID    = "part_01jx4d9a1b2c3d4e5f6g7h8j9k"
)

// newEvent returns a message.updated event whose text carries the time it
// was made and is padded to size bytes: a typical streamed snapshot. The
// time is the wall clock's, so that the stamps of a server in a child
// process compare with the client's reading of the same clock.
func newEvent(size int) *sandbox.Event {
	var b strings.Builder
	b.Grow(max(size, 32))
	fmt.Fprintf(&b, "%s%d ", stampMarker, time.Now().UnixNano())
	const filler = "All work and no play makes Jack a dull boy. "
	for b.Len() < size {
		b.WriteString(filler[:min(len(filler), size-b.Len())])
	}
	return &sandbox.Event{
		Type: sandbox.TypeMessageUpdated,
		Data: &sandbox.MessageUpdated{MessageID: benchMessageID, PartID: benchPartID, Kind: sandbox.PartText, Text: b.String()},
	}
}

// newLogger logs what goes wrong inside a server at error level only: a
// benchmark makes clients leave by the thousand, which is no news.
func newLogger(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}
