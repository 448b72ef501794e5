// Package app is the Sparkles server wired once: the event store, the
// coordinator and its agents, retention, metrics, the HTTP API with /readyz
// and the console. sparkles serve, the sparklestest helper and sparkles
// bench all run a Main, so what a test or a benchmark runs is the server a
// user runs; the fields turn off what one of them does not want.
package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
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

	Metrics     *metrics.Metrics
	Store       Store                // opened by Run unless set before it (a wrapped store in tests); Close closes it
	Cluster     *natscluster.Cluster // with a NATS store only
	Retainer    *retention.Loop
	Webhooks    *webhook.Loop // nil when the store keeps no webhooks
	Coordinator *coordinator.Coordinator
	Server      *server.Server
	Listener    net.Listener
	Launcher    *confine.Launcher // nil when agents run unconfined
	isolation   string            // what confines agents, for /readyz and the log
	serveErr    chan error        // Serve's return, once
	token       string            // the server token, and the file it came from ("" when given)
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
	// The launcher's checks of the options and the kernel are quick; its
	// probe runs a confined process (tens of ms, more on a cold page
	// cache). Neither needs the store, whose open reads its file, so they
	// run beside it, and the server serves what its store holds before
	// the probe ends: no agent starts until the probe passed (Start waits
	// for it), /readyz says so meanwhile, and a probe that fails fails
	// the start as it did before.
	launched, probed := make(chan error, 1), make(chan error, 1)
	go func() {
		err := m.openLauncher()
		launched <- err
		if err == nil && m.Launcher != nil {
			err = m.Launcher.Probe()
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
	if err := <-launched; err != nil {
		if storeErr == nil && m.Store == nil {
			// Opened here for a start that does not happen: let go of it
			// (and of the cluster a NATS store joined) before saying why.
			if m.Cluster != nil {
				m.Cluster.Close()
				m.Cluster = nil
			}
			st.Close()
		}
		return err
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
		Launcher:        launcher(m.Launcher),
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
		Isolation:   m.isolation,
		Static:      console,
		Webhooks:    webhooks,

		MaxConnections:                m.MaxConnections,
		MaxUnauthenticatedConnections: m.MaxUnauthenticatedConnections,
		TurnImageMax:                  m.TurnImageMax,
	})
	l, err := m.Server.Listen(m.Addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("address %s is already in use; stop the other server or pass --addr", m.Addr)
		}
		return fmt.Errorf("cannot listen on %s: %w", m.Addr, err)
	}
	m.Listener = l
	m.serveErr = make(chan error, 1)
	go func() { m.serveErr <- m.Server.Serve(l) }()
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
	m.Logger.Info("sparkles is serving", "console", "http://"+l.Addr().String()+"/", "api", "http://"+l.Addr().String()+"/v1", "data_dir", m.DataDir, "isolation", m.isolation)
	return nil
}

// waitProbe waits for the confinement probe's verdict, which Run returns
// with: a server whose agents cannot be confined does not start.
func (m *Main) waitProbe(ctx context.Context) error {
	select {
	case err := <-m.probed:
		m.probeDone.Store(true)
		if err != nil {
			return fmt.Errorf("%w: %v; pass --isolation=off (SPARKLES_ISOLATION=off) to run them unconfined, with the server user's rights", ErrNotConfinable, err)
		}
		if m.Launcher != nil {
			m.Logger.Info("agents are confined", append([]any{"isolation", m.isolation}, m.Launcher.LogAttrs()...)...)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openLauncher confines agent processes unless isolation is off, and
// fails, naming the flag that switches it off, where the machine cannot:
// never run agents unconfined without being told to.
func (m *Main) openLauncher() error {
	switch {
	case m.Isolation == "off":
		if m.Confine.Network == confine.NetworkNone {
			return errors.New("--agent-network none needs isolation; drop --isolation=off")
		}
		for _, name := range m.Agents.Names() {
			if m.Agents[name].Confined() {
				return fmt.Errorf("agent %q sets network, read_paths, write_paths or host_ports, which need isolation; drop --isolation=off or those settings", name)
			}
		}
		m.isolation = "off"
		m.Logger.Warn("agents run unconfined, with the server user's rights (--isolation=off)")
		return nil
	case m.Isolation != "" && m.Isolation != "on":
		return fmt.Errorf("--isolation %q: want on or off", m.Isolation)
	case len(m.Agents) == 0:
		m.isolation = "none needed: no agent processes"
		return nil
	}
	opts := m.Confine
	opts.DataDir, opts.Logger = m.DataDir, m.Logger
	l, err := confine.Prepare(opts)
	var bad *confine.OptionError
	if errors.As(err, &bad) {
		flag := map[string]string{"Network": "--agent-network", "ReadPaths": "--agent-read-path", "WritePaths": "--agent-write-path", "MemoryMax": "--agent-memory-max", "HostPorts": "--agent-host-port"}[bad.Field]
		return fmt.Errorf("%s %s", flag, bad.Msg)
	}
	if err != nil {
		return fmt.Errorf("%w: %v; pass --isolation=off (SPARKLES_ISOLATION=off) to run them unconfined, with the server user's rights", ErrNotConfinable, err)
	}
	for _, name := range m.Agents.Names() {
		a := m.Agents[name]
		if err := l.Check(confinementOf(a)); errors.As(err, &bad) {
			field := map[string]string{"Network": "network", "ReadPaths": "read_paths", "WritePaths": "write_paths", "HostPorts": "host_ports"}[bad.Field]
			return fmt.Errorf("agent %q: %s %s", name, field, bad.Msg)
		}
		if err := l.CheckCommandLine(a.Argv()); err != nil {
			return fmt.Errorf("agent %q: %v", name, err)
		}
	}
	m.Launcher, m.isolation = l, l.Isolation()
	return nil
}

// launcher keeps a nil *confine.Launcher from becoming a non-nil interface.
func launcher(l *confine.Launcher) agent.Launcher {
	if l == nil {
		return nil
	}
	return l
}

// openStore opens the store StoreURL names and, on NATS, joins the cluster
// of coordinators sharing it. where names the store for messages.
func (m *Main) openStore(ctx context.Context) (st Store, where string, err error) {
	if m.StoreURL == "" {
		where = datadir.Dir(m.DataDir).Store()
		if err := m.checkDatabaseKept(where); err != nil {
			return nil, "", err
		}
		bs, err := boltstore.Open(where, boltstore.Options{Timeout: time.Second, Logger: m.Logger, Observer: m.Metrics})
		if _, ok := errors.AsType[*boltstore.DamagedError](err); ok {
			return nil, "", fmt.Errorf("%w. Restore it from a copy that sparkles db check passes, "+
				"or move it away and pass --start-empty to start without its sandboxes", err)
		}
		if err != nil {
			return nil, "", err
		}
		m.writable = bs.Writable
		return bs, where, nil
	}
	// Several servers of one JetStream cluster are given comma-separated,
	// so the connection moves to another when one goes away.
	var wheres []string
	for _, part := range strings.Split(m.StoreURL, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			return nil, "", fmt.Errorf("--store %q: want nats://HOST:PORT (or tls://HOST:PORT; several of one cluster comma-separated), or nothing for the bbolt file in --data-dir", m.StoreURL)
		}
		wheres = append(wheres, u.Redacted())
	}
	where = strings.Join(wheres, ",")
	if m.NATSReplicas < 0 || m.NATSReplicas > 5 {
		return nil, "", fmt.Errorf("--nats-replicas %d: JetStream keeps 1 to 5 replicas (3 on a cluster of 3 or more servers)", m.NATSReplicas)
	}
	if m.NodeID == "" {
		m.NodeID = natscluster.DefaultNodeName()
	}
	if m.AdvertiseURL != "" {
		if _, err := natscluster.CheckAPIURL(m.AdvertiseURL); err != nil {
			return nil, "", fmt.Errorf("--advertise-url: %w", err)
		}
	}
	// The stream's own age limit is a safety net far above the retention
	// loop's, which prunes first and moves the watermarks as it does.
	safety := 2 * max(m.Retention.MaxAge, retention.DefaultMaxAge)
	ns, err := natsstore.Open(ctx, m.StoreURL, natsstore.Options{Logger: m.Logger, MaxAge: safety, Observer: m.Metrics, Replicas: m.NATSReplicas})
	if err != nil {
		return nil, "", fmt.Errorf("cannot open the NATS store at %s: %w", where, err)
	}
	cl, err := natscluster.Join(ctx, ns, natscluster.Options{Node: m.NodeID, LeaseTTL: m.LeaseTTL, Logger: m.Logger, Replicas: m.NATSReplicas, APIURL: m.AdvertiseURL})
	if err != nil {
		ns.Close()
		if errors.Is(err, natscluster.ErrNodeInUse) {
			return nil, "", fmt.Errorf("node id %q is taken by a live coordinator on %s; pass another --node-id (if it was this node's last run, its registration expires within --lease-ttl)", m.NodeID, where)
		}
		return nil, "", fmt.Errorf("cannot join the coordinators on %s: %w", where, err)
	}
	m.Cluster = cl
	m.Logger.Info("sharing the NATS store with other coordinators", "store", where, "node", cl.Node(), "lease_ttl", cl.TTL())
	return ns, where, nil
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

// ready is what /readyz asks: the store answers and takes writes,
// retention runs, and with a NATS store the connection, the stream and the
// bucket are up and this node's leases hold.
func (m *Main) ready() error {
	if !m.probeDone.Load() {
		return errors.New("checking that agents can be confined: no agent starts until the check passed")
	}
	if _, _, err := m.Store.Sandboxes(context.Background(), "", 1); err != nil {
		return fmt.Errorf("the database does not answer (%w); see the server log", err)
	}
	if m.writable != nil {
		if err := m.writable(); err != nil {
			return errors.New("the database file was deleted or replaced under the running server: it takes no writes; see the server log")
		}
	}
	// A store that answers reads may still refuse writes (a full disk):
	// such a server can show logs but run no turn.
	if err := m.Coordinator.Writable(); err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return errors.New(se.Message)
		}
		return err
	}
	if h, ok := m.Store.(interface{ Health(context.Context) error }); ok {
		if err := h.Health(context.Background()); err != nil {
			return fmt.Errorf("the NATS store cannot write: %w", err)
		}
	}
	if m.Retainer != nil && !m.Retainer.Alive() {
		return errors.New("the retention loop is not running or makes no progress; see the server log for its last error")
	}
	if m.Cluster != nil {
		return m.Cluster.Ready()
	}
	return nil
}

// checkDatabaseKept refuses to start on a new database where the data dir's
// is missing or empty (0 bytes) while sandbox directories remain: that is a
// database lost (deleted, truncated, a restore that failed), and starting
// would forget every sandbox without a word. StartEmpty says to go on.
func (m *Main) checkDatabaseKept(path string) error {
	info, err := os.Stat(path)
	if err == nil && info.Size() > 0 || err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil // a database, or an error the store's open reports
	}
	state := "missing"
	if err == nil {
		state = "empty (0 bytes)"
	}
	dir := datadir.Dir(m.DataDir).Sandboxes()
	entries, _ := os.ReadDir(dir)
	boxes := 0
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), sandbox.PrefixSandbox) {
			boxes++
		}
	}
	if boxes == 0 {
		return nil
	}
	if m.StartEmpty {
		m.Logger.Warn("starting with a new database beside sandbox directories: their sandboxes are forgotten", "path", path, "was", state, "sandbox_dirs", boxes)
		return nil
	}
	return fmt.Errorf("the database %s is %s, but %s holds %d sandbox directories, whose sandboxes it would forget. "+
		"Restore the database from a copy, or pass --start-empty (SPARKLES_START_EMPTY=true) to start without them", path, state, dir, boxes)
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable (%v); pass a writable --data-dir", dir, UnwrapPath(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// UnwrapPath is the error of a path error without its path, for messages
// that name the path themselves.
func UnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// tighten takes from path every permission beyond want (the data dir
// 0700, the token 0600), as it was made: anything looser lets another local
// user read the token or the database. It says so, since what was readable
// may have been read.
func (m *Main) tighten(path string, want fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cannot stat %s (%v)", path, UnwrapPath(err))
	}
	if fi.Mode().Perm()&^want == 0 {
		return nil
	}
	if err := os.Chmod(path, fi.Mode().Perm()&want); err != nil {
		return fmt.Errorf("%s has mode %04o, readable by other users, and cannot be made %04o (%v); fix its permissions", path, fi.Mode().Perm(), want, UnwrapPath(err))
	}
	// A directory made by hand (or by mktemp -d, or a test's TempDir) is
	// 0755 as a matter of course; a token file readable by others is news.
	log := m.Logger.Debug
	if !fi.IsDir() {
		log = m.Logger.Warn
	}
	log("permissions were looser than the server makes them: tightened; rotate the token if other users could read it",
		"path", path, "was", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", fmt.Sprintf("%04o", fi.Mode().Perm()&want))
	return nil
}

// loadToken returns the token to use: the given one, else the one kept in
// <dataDir>/token, else a new one written there with mode 0600. The path is
// returned when the token came from (or went to) the file.
func loadToken(dataDir, given string) (token, path string, err error) {
	if given != "" {
		return given, "", nil
	}
	path = datadir.Dir(dataDir).Token()
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, path, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("cannot read token file %s (%v); fix its permissions or pass --token", path, UnwrapPath(err))
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	token = "spk_" + base64.RawURLEncoding.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("cannot write token file %s (%v); pass a writable --data-dir or --token", path, UnwrapPath(err))
	}
	return token, path, nil
}

// confinementOf is what an agent's registry entry adds to the confinement.
func confinementOf(a registry.Agent) agent.Confinement {
	return agent.Confinement{Network: a.Network, ReadPaths: a.ReadPaths, WritePaths: a.WritePaths, HostPorts: a.HostPorts}
}

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
