// Package sparklestest runs a real Sparkles server inside a Go test, for the
// integration tests of programs that drive agents through Sparkles.
//
// Start runs the server sparkles serve runs, on a temporary data
// directory: the event store, the coordinator with the built-in demo agent
// (in-process: no sparkles binary is needed on PATH), retention, metrics,
// /readyz and the console, and the HTTP API on a free loopback port. Options
// change what a test needs changed or turn off what it does not want. The
// server stops when the test ends. Stop and Restart stop it and start it
// again on the same store and address, to test what a client does across a
// server restart.
package sparklestest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A test binary that imports this package is its own agent launcher, as
// the sparkles binary is: the server starts each confined agent (the
// default isolation, "on") by running its own executable again with the
// launcher's arguments, which this answers before any test runs.
func init() {
	if confine.IsEntry(os.Args) {
		confine.Main()
	}
}

// DefaultToken is the server token when no WithToken option is given.
const DefaultToken = "sparklestest-token"

// Server is a running Sparkles server of one test.
type Server struct {
	// URL is the base URL of the API, e.g. http://127.0.0.1:40123.
	URL string
	// Token is the server token: every call may use it.
	Token string
	// Client is a client of URL with Token.
	Client *client.Client
	// DataDir holds the event store and the sandboxes' directories.
	DataDir string

	tb   testing.TB
	cfg  config
	addr string

	mu  sync.Mutex
	run *app.Main // nil while stopped
}

type config struct {
	token        string
	dataDir      string
	addr         string
	agents       registry.Registry
	builtins     map[string]coordinator.BuiltinAgent
	defaultAgent string
	keepalive    time.Duration
	approval     time.Duration
	turn         time.Duration
	flush        time.Duration
	logger       *slog.Logger
	isolation    string
	hostPorts    []int
	retention    retention.Config
	noRetention  bool
	noConsole    bool
	// webhookMinBackoff and webhookMaxBackoff bound the delays between
	// a failed delivery and its retry (0: serve's).
	webhookMinBackoff, webhookMaxBackoff time.Duration
}

// Option configures Start.
type Option func(*config)

// WithToken sets the server token (default DefaultToken).
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithDataDir puts the store and the sandboxes in dir instead of a new
// temporary directory, e.g. to start a second server on the store of a
// stopped one.
func WithDataDir(dir string) Option { return func(c *config) { c.dataDir = dir } }

// WithAddr listens on addr instead of a free port of 127.0.0.1.
func WithAddr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithAgent registers an ACP agent that runs as the process command. The
// demo agent stays available as "demo".
func WithAgent(name string, command ...string) Option {
	return func(c *config) {
		if len(command) > 0 {
			c.agents[name] = registry.Agent{Command: command[0], Args: command[1:]}
		}
	}
}

// Agent is an agent as an entry of the agents file has it: the command,
// its arguments and the environment its processes get.
type Agent struct {
	Command string
	Args    []string
	// Env is set in the agent's processes; PassEnv names variables of the
	// test's own environment handed over as they are.
	Env     map[string]string
	PassEnv []string
	// HostPorts are ports of the test's loopback (127.0.0.1) the
	// agent's processes may reach, as the agents file's host_ports:
	// confined, an agent reaches nothing else of it (see
	// WithAgentHostPort).
	HostPorts []int
}

// WithRegisteredAgent registers an agent as an entry of the agents file
// has it.
func WithRegisteredAgent(name string, a Agent) Option {
	return func(c *config) {
		c.agents[name] = registry.Agent{Command: a.Command, Args: a.Args, Env: a.Env, PassEnv: a.PassEnv, HostPorts: a.HostPorts}
	}
}

// WithBuiltinAgent registers an ACP agent that runs in-process: run reads
// the client's requests from stdin and writes to stdout until ctx ends or
// stdin closes; env is the environment it would have had as a process.
func WithBuiltinAgent(name string, run func(ctx context.Context, stdin io.Reader, stdout io.Writer, env []string) error) Option {
	return func(c *config) { c.builtins[name] = run }
}

// WithIsolation sets how agent processes run, as serve's --isolation: "on"
// (the default) confines them and fails Start where the kernel cannot,
// "off" runs them with the test's rights. In-process agents are never
// confined.
func WithIsolation(mode string) Option { return func(c *config) { c.isolation = mode } }

// WithAgentHostPort lets every confined agent reach port of the test's
// 127.0.0.1 (a fake model API, say) at the same port of its own, as
// serve's --agent-host-port: a confined agent has a network namespace of
// its own and reaches nothing else of the test's loopback.
func WithAgentHostPort(port int) Option {
	return func(c *config) { c.hostPorts = append(c.hostPorts, port) }
}

// WithRetention sets the retention loop's limits and interval (serve's
// --retention-* flags); zero fields keep serve's defaults.
func WithRetention(cfg retention.Config) Option { return func(c *config) { c.retention = cfg } }

// WithoutRetention runs no retention loop: nothing is pruned but what the
// test prunes with Prune.
func WithoutRetention() Option { return func(c *config) { c.noRetention = true } }

// WithoutConsole serves the API without the web console at /.
func WithoutConsole() Option { return func(c *config) { c.noConsole = true } }

// WithWebhookBackoff sets the delay after a webhook delivery's first
// failure, min, which doubles with each failure up to max (serve's: 5 s
// and 1 h), so a test sees a failing receiver's retries without waiting.
func WithWebhookBackoff(min, max time.Duration) Option {
	return func(c *config) { c.webhookMinBackoff, c.webhookMaxBackoff = min, max }
}

// WithDefaultAgent names the agent of sandboxes created without one
// (default "demo").
func WithDefaultAgent(name string) Option { return func(c *config) { c.defaultAgent = name } }

// WithKeepalive sets the interval of SSE pings on idle streams.
func WithKeepalive(d time.Duration) Option { return func(c *config) { c.keepalive = d } }

// WithApprovalTimeout sets how long an approval waits for a decision.
func WithApprovalTimeout(d time.Duration) Option { return func(c *config) { c.approval = d } }

// WithTurnTimeout sets how long a turn may run.
func WithTurnTimeout(d time.Duration) Option { return func(c *config) { c.turn = d } }

// WithFlushInterval sets the coalescing interval of message.updated.
func WithFlushInterval(d time.Duration) Option { return func(c *config) { c.flush = d } }

// WithLogger sends the server's logs to l (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Start starts a server for the test tb and stops it when the test ends.
// It fails the test if the server cannot start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := config{
		token:        DefaultToken,
		addr:         "127.0.0.1:0",
		agents:       registry.Registry{},
		builtins:     map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo},
		defaultAgent: "demo",
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.dataDir == "" {
		cfg.dataDir = tb.TempDir()
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{tb: tb, cfg: cfg, addr: cfg.addr, Token: cfg.token, DataDir: cfg.dataDir}
	if err := s.start(); err != nil {
		if errors.Is(err, app.ErrNotConfinable) {
			tb.Fatalf("sparklestest: start server: %v. In a test, WithIsolation(\"off\") does that", err)
		}
		tb.Fatalf("sparklestest: start server: %v", err)
	}
	s.URL = "http://" + s.addr
	s.Client = client.New(s.URL, s.Token)
	tb.Cleanup(s.Stop)
	return s
}

// Addr returns the address the server listens on (host:port).
func (s *Server) Addr() string { return s.addr }

func (s *Server) start() error {
	m := &app.Main{
		// A restart listens on the port the first start was given, so
		// clients keep their URL.
		Addr:            s.addr,
		DataDir:         s.cfg.dataDir,
		Token:           s.cfg.token,
		Keepalive:       s.cfg.keepalive,
		Agents:          maps.Clone(s.cfg.agents),
		Builtins:        maps.Clone(s.cfg.builtins),
		DefaultAgent:    s.cfg.defaultAgent,
		ApprovalTimeout: s.cfg.approval,
		TurnTimeout:     s.cfg.turn,
		FlushInterval:   s.cfg.flush,
		Retention:       s.cfg.retention,
		NoRetention:     s.cfg.noRetention,
		NoConsole:       s.cfg.noConsole,
		Isolation:       s.cfg.isolation,
		Confine:         confine.Options{HostPorts: s.cfg.hostPorts},
		Logger:          s.cfg.logger,
		// Tests receive webhooks on loopback.
		WebhookAllowPrivate: true,
		WebhookMinBackoff:   s.cfg.webhookMinBackoff,
		WebhookMaxBackoff:   s.cfg.webhookMaxBackoff,
	}
	if err := m.Run(context.Background()); err != nil {
		return errors.Join(err, m.Close())
	}
	s.addr = m.Listener.Addr().String()
	s.mu.Lock()
	s.run = m
	s.mu.Unlock()
	return nil
}

// Stop stops the server as a shutdown of sparkles serve does: streams end,
// running turns are completed, agents stop, the store closes. The data
// stays. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	in := s.run
	s.run = nil
	s.mu.Unlock()
	if in == nil {
		return
	}
	if err := in.Close(); err != nil {
		s.tb.Errorf("sparklestest: stop server: %v", err)
	}
}

// Prune removes every event of a sandbox's log with an id <= through, as
// the retention loop does, so a test can see what its client does with a
// cursor that retention has passed.
func (s *Server) Prune(sandboxID string, through uint64) {
	s.tb.Helper()
	in := s.running()
	if _, err := in.Store.Prune(context.Background(), sandboxID, through, 0); err != nil {
		s.tb.Fatalf("sparklestest: prune %s through %d: %v", sandboxID, through, err)
	}
}

// AppendEvents appends events to a sandbox's log as its agent's turn
// would, for tests that make the events a client sees themselves instead
// of running an agent. It fails the test if the store refuses them.
func (s *Server) AppendEvents(sandboxID string, events ...*sandbox.Event) {
	s.tb.Helper()
	if err := s.running().Coordinator.AppendEvents(context.Background(), sandboxID, events...); err != nil {
		s.tb.Fatalf("sparklestest: append to %s: %v", sandboxID, err)
	}
}

func (s *Server) running() *app.Main {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		s.tb.Fatalf("sparklestest: the server is stopped")
	}
	return s.run
}

// Restart stops the server if it runs, then starts it again on the same
// store and address. Clients and streams of the old one keep working
// against the new one.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.tb.Fatalf("sparklestest: restart server: %v", err)
	}
}
