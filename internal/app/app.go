// Package app is the Sparkles server wired once: the data dir and the
// token kept in it (where each file lies is internal/datadir's), the event
// store (the bbolt file, or NATS JetStream and the cluster of coordinators
// sharing it), the coordinator and its confined agents, retention, webhook
// deliveries, metrics, the HTTP API with /readyz and the console. sparkles
// serve, the sparklestest helper and sparkles bench all run a Main, so what
// a test or a benchmark runs is the server a user runs; the fields turn off
// what one of them does not want.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/metrics"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/server"
	"github.com/sparkles-dev/sparkles/web"
)

// Store is what serve needs of an event store: what the coordinator, the
// server's reads and the retention loop use, and the consistency check.
// The bbolt file and NATS JetStream both provide it.
type Store interface {
	sandbox.Store
	retention.Store
	Check() error
}

var (
	_ Store = (*boltstore.Store)(nil)
	_ Store = (*natsstore.Store)(nil)
)

// The API's defaults that serve's flags show: see server.Config.
const (
	DefaultMaxConnections                = server.DefaultMaxConnections
	DefaultMaxUnauthenticatedConnections = server.DefaultMaxUnauthenticatedConnections
	DefaultUnauthenticatedIdleTimeout    = server.DefaultUnauthenticatedIdleTimeout
	DefaultKeepalive                     = server.DefaultKeepalive
)

// ErrNotConfinable is the error of a Run that would confine agent
// processes (isolation on, the default) where they cannot be: the kernel
// lacks what confinement needs, or the executable does not answer as the
// launcher (see confine.Main).
var ErrNotConfinable = errors.New("agents cannot be confined on this machine")

// Main is the running server: the store, the coordinator and the HTTP server,
// wired as plain fields so tests can build one too.
type Main struct {
	Addr    string
	DataDir string
	// StoreURL chooses the store: empty for the bbolt file in DataDir,
	// nats://HOST:PORT for NATS JetStream, shared with the other
	// coordinators on it (NodeID names this one among them; LeaseTTL is
	// how long its sandboxes stay its own after it stops renewing).
	StoreURL        string
	NodeID          string
	LeaseTTL        time.Duration
	NATSReplicas    int // of the stream and buckets that serve creates on NATS; 0 is 1
	Token           string
	Keepalive       time.Duration
	Agents          registry.Registry
	DefaultAgent    string
	BootTimeout     time.Duration
	TurnTimeout     time.Duration
	ApprovalTimeout time.Duration
	FlushInterval   time.Duration
	CORSOrigins     []string
	Retention       retention.Config // Store, DataDir, Logger and Observer are set by Run
	Logger          *slog.Logger
	// LogRequests logs each API request at INFO rather than DEBUG (see
	// server.Config).
	LogRequests bool
	// Isolation "off" runs agent processes with the server user's rights;
	// anything else, the zero value included, confines them (Confine says
	// how; its DataDir and Logger are set by Run) and Run fails where this
	// machine cannot.
	Isolation string
	Confine   confine.Options
	// StartEmpty lets the bbolt store start on a new file where the data
	// dir's is missing or empty while sandbox directories remain.
	StartEmpty bool
	// AdvertiseURL is where the other coordinators on a NATS store reach
	// this one's API, to proxy the workspace requests of the sandboxes it
	// runs (empty: derived from Addr once it listens; see advertise.go).
	AdvertiseURL string

	// MaxConnections and MaxUnauthenticatedConnections cap the API's
	// connections, all and those that have shown no token (0: the
	// defaults; see server.Config).
	MaxConnections                int
	MaxUnauthenticatedConnections int

	// AgentIdleTimeout and MaxAgents: see coordinator.Config.
	AgentIdleTimeout time.Duration
	MaxAgents        int
	// AgentFSBudget: coordinator.Config.FSBudget.
	AgentFSBudget int64
	// SandboxDiskMax and DiskReserve are the disk limits of agents (see
	// coordinator.Config); zero is none, which serve's flags replace with
	// defaults.
	SandboxDiskMax int64
	DiskReserve    int64
	// FileLimits bound what the API writes into a workspace (see
	// coordinator.Config); zero fields take workspace's defaults.
	FileLimits workspace.Limits
	// TurnImageMax bounds one image or file of a turn's input
	// (coordinator.Config); 0 takes the default.
	TurnImageMax int64
	// Builtins are agents run in-process (see coordinator.Config); the
	// test helper runs the demo agent so, without a binary on PATH.
	Builtins map[string]coordinator.BuiltinAgent

	// NoRetention runs no retention loop: nothing is pruned, and /readyz
	// does not ask after it. For benchmarks that fill one log past the
	// limits, and tests that prune by hand.
	NoRetention bool
	// NoConsole serves the API without the web console at /.
	NoConsole bool
	// WebhookAllowPrivate lets webhook endpoints be loopback, link-local
	// or private addresses (local development and tests; see
	// docs/webhooks.md).
	WebhookAllowPrivate bool
	// WebhookMinBackoff and WebhookMaxBackoff bound the delays between a
	// failed delivery and its next attempt (0: webhook's defaults, 5 s
	// and 1 h); tests shorten them.
	WebhookMinBackoff, WebhookMaxBackoff time.Duration
	// Observer, when set, is told what the metrics are told, beside them.
	Observer Observer
	// Signals, when set, is closed once the process handles SIGINT and
	// SIGTERM; Run serves only after it is, so a client that saw the
	// server answer can stop it cleanly with a signal.
	Signals <-chan struct{}

	Metrics     *metrics.Metrics
	Store       Store                // opened by Run unless set before it (a wrapped store in tests); Close closes it
	Cluster     *natscluster.Cluster // with a NATS store only
	Retainer    *retention.Loop
	Webhooks    *webhook.Loop // nil when the store keeps no webhooks
	Coordinator *coordinator.Coordinator
	Server      *server.Server
	Listener    net.Listener
	Launcher    *confine.Launcher      // once the probe passed (Run returned); nil when agents run unconfined
	isolation   atomic.Pointer[string] // what confines agents, for /readyz and the log (see isolationNow)
	serveErr    chan error             // Serve's return, once
	token       string                 // the server token, and the file it came from ("" when given)
	tokenPath   string
	// writable, when set, says whether the store takes writes (the bbolt
	// file is still at its path), for /readyz.
	writable func() error
	// probed gives the confinement probe's verdict, which Run waits for
	// once it serves; probeDone is set then, for /readyz.
	probed    chan error
	probeDone atomic.Bool
}

// Run opens everything and starts serving; it returns once the server
// listens. Every failure is one sentence that says what to do.
func (m *Main) Run(ctx context.Context) error {
	// The address is taken first: a busy port is an error before the
	// store is opened, and a client that connects while the store opens
	// waits in the listen backlog for its answer instead of being refused.
	l, err := net.Listen("tcp", m.Addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("address %s is already in use; stop the other server or pass --addr", m.Addr)
		}
		return fmt.Errorf("cannot listen on %s: %w", m.Addr, err)
	}
	// serving tells the probe's goroutine below whether the server came to
	// serve; until it does, a failed Run closes the listener itself (after
	// that, Close closes it with the server).
	serving := make(chan bool, 1)
	served := false
	defer func() {
		if !served {
			l.Close()
			serving <- false
		}
	}()
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return fmt.Errorf("cannot create data dir %s (%v); pass a writable --data-dir", m.DataDir, UnwrapPath(err))
	}
	if err := checkWritable(m.DataDir); err != nil {
		return err
	}
	if err := m.tighten(m.DataDir, 0o700); err != nil {
		return err
	}
	token, tokenPath, err := loadToken(m.DataDir, m.Token)
	if err != nil {
		return err
	}
	if tokenPath != "" {
		if err := m.tighten(tokenPath, 0o600); err != nil {
			return err
		}
	}
	m.token, m.tokenPath = token, tokenPath
	// What confines agents is settled here where it needs no kernel. Where
	// they are confined, the launcher is prepared (its checks of the
	// kernel, the paths and each agent's settings) and probed (two
	// confined processes of this binary, tens of ms of CPU, more on a cold
	// page cache) once the server serves what its store holds: on the way
	// to the first answer they would take the CPU from the server's own
	// start. No agent starts until both passed (the late launcher's Start
	// waits), /readyz says so meanwhile, and a failure of either fails the
	// start as it did before.
	late, err := m.planIsolation()
	if err != nil {
		return err
	}
	probed := make(chan error, 1)
	go func() {
		var err error
		if late != nil {
			if <-serving {
				err = confine.Yielding(m.confineAgents)
			} else {
				err = errors.New("the server did not start")
			}
			late.settle(m.Launcher, err)
		}
		probed <- err
	}()
	m.probed = probed
	m.Metrics = metrics.New()
	obs := observers{m.Metrics, m.Observer}
	if m.Observer == nil {
		obs.extra = NopObserver{}
	}
	st, where := m.Store, "the given store"
	var storeErr error
	if st == nil {
		st, where, storeErr = m.openStore(ctx)
	}
	if storeErr != nil {
		return storeErr
	}
	m.Store = st
	var cluster cluster.Cluster
	if m.Cluster != nil {
		cluster = m.Cluster
	}
	// Retention is made before the coordinator, which nudges it when a log
	// grows past its byte bound, and starts once the sandboxes are
	// recovered. The coordinator bounds a turn's bytes with or without it.
	var retainer *retention.Loop
	if !m.NoRetention {
		rc := m.Retention
		rc.Store, rc.DataDir, rc.Logger, rc.Observer = st, m.DataDir, m.Logger, m.Metrics
		retainer = retention.New(rc)
	}
	logMax := m.Retention.MaxBytes
	if logMax <= 0 {
		logMax = retention.DefaultMaxBytes
	}
	co, err := coordinator.New(coordinator.Config{
		Store:           st,
		DataDir:         m.DataDir,
		Agents:          m.Agents,
		DefaultAgent:    m.DefaultAgent,
		Launcher:        launcher(late),
		BootTimeout:     m.BootTimeout,
		TurnTimeout:     m.TurnTimeout,
		ApprovalTimeout: m.ApprovalTimeout,
		FlushInterval:   m.FlushInterval,
		Logger:          m.Logger,
		Observer:        obs,
		Builtins:        m.Builtins,
		Cluster:         cluster,
		// Whatever an agent prints, neither the server token nor the
		// sandbox's stream token leaves in one of its strings.
		Redact:           func(id string) []string { return []string{token, server.StreamToken(token, id)} },
		AgentIdleTimeout: m.AgentIdleTimeout,
		MaxAgents:        m.MaxAgents,
		FSBudget:         m.AgentFSBudget,
		SandboxDiskMax:   m.SandboxDiskMax,
		DiskReserve:      m.DiskReserve,
		FileLimits:       m.FileLimits,
		TurnImageMax:     m.TurnImageMax,
		LogMaxBytes:      logMax,
		LogOver: func(id string) {
			if retainer != nil {
				retainer.Nudge(id)
			}
		},
	})
	if err != nil {
		return err
	}
	m.Coordinator = co
	if err := co.Recover(ctx); err != nil {
		return fmt.Errorf("recovering sandboxes from %s: %w", where, err)
	}
	m.Retainer = retainer
	m.Webhooks = m.newWebhooks(st, co)
	var webhooks server.Webhooks
	if m.Webhooks != nil {
		webhooks = m.Webhooks
	}
	var console http.Handler
	if !m.NoConsole {
		console = web.Handler()
	}
	m.Server = server.New(server.Config{
		Backend:     co,
		Store:       st,
		CORSOrigins: m.CORSOrigins,
		Token:       token,
		Keepalive:   m.Keepalive,
		Logger:      m.Logger,
		LogRequests: m.LogRequests,
		Metrics:     m.Metrics.Handler(),
		Observer:    obs,
		Ready:       m.ready,
		Isolation:   m.isolationNow,
		Static:      console,
		Webhooks:    webhooks,

		MaxConnections:                m.MaxConnections,
		MaxUnauthenticatedConnections: m.MaxUnauthenticatedConnections,
		TurnImageMax:                  m.TurnImageMax,
	})
	m.Listener = l
	if m.Signals != nil {
		<-m.Signals
	}
	m.serveErr = make(chan error, 1)
	go func() { m.serveErr <- m.Server.Serve(l) }()
	served = true
	serving <- true
	if err := m.waitProbe(ctx); err != nil {
		return err
	}
	if m.Retainer != nil {
		m.Retainer.Start()
	}
	if m.Webhooks != nil {
		m.Webhooks.Start()
	}
	m.advertise(ctx, l.Addr())
	if tokenPath != "" {
		m.Logger.Info("token file", "path", tokenPath)
	}
	if host, _, err := net.SplitHostPort(l.Addr().String()); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			m.Logger.Warn("listening beyond this machine: anyone who can reach this address and holds the token controls the agents", "addr", l.Addr().String())
		}
	}
	m.Logger.Info("sparkles is serving", "console", "http://"+l.Addr().String()+"/", "api", "http://"+l.Addr().String()+"/v1", "data_dir", m.DataDir, "isolation", m.isolationNow())
	return nil
}

// ServedToken is the server token Run serves with and the file it was read
// from or written to ("" when Token gave it).
func (m *Main) ServedToken() (token, path string) { return m.token, m.tokenPath }

// Wait blocks until ctx is done, and returns nil, or until the HTTP server
// stops serving on its own (its listener failed), and returns why: a server
// that no longer answers must not look as if it ran. Close it after.
func (m *Main) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-m.serveErr:
		m.serveErr <- err // for a later Wait
		return fmt.Errorf("the HTTP server stopped serving on %s: %w", m.Listener.Addr(), err)
	}
}

// Close shuts down in order: streams end and HTTP stops, running turns are
// completed and agents stopped, then the store commits what is queued and closes.
// With a NATS store, this node's leases go after its turns are settled, so
// another node can take its sandboxes at once.
func (m *Main) Close() error {
	var errs []error
	if m.Server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, m.Server.Shutdown(ctx))
		cancel()
	}
	if m.Coordinator != nil {
		errs = append(errs, m.Coordinator.Close())
	}
	if m.Webhooks != nil {
		errs = append(errs, m.Webhooks.Close())
	}
	if m.Cluster != nil {
		errs = append(errs, m.Cluster.Close())
	}
	if m.Retainer != nil {
		errs = append(errs, m.Retainer.Close())
	}
	if m.Store != nil {
		errs = append(errs, m.Store.Close())
	}
	return errors.Join(errs...)
}
