// Package sparklestest runs a real Sparkles server inside a Go test, for the
// integration tests of programs that drive agents through Sparkles.
//
// Start opens the event store on a temporary directory, starts the
// coordinator with the built-in demo agent (in-process: no sparkles binary is
// needed on PATH), and serves the HTTP API on a free loopback port. The
// server stops when the test ends. Stop and Restart stop it and start it
// again on the same store and address, to test what a client does across a
// server restart.
package sparklestest

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/server"
)

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
	run *instance // nil while stopped
}

// instance is one start of the server: what Stop closes.
type instance struct {
	store *boltstore.Store
	coord *coordinator.Coordinator
	srv   *server.Server
	done  chan error
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

// WithRegisteredAgent registers an agent as an entry of the agents file
// has it: command, arguments and the environment its processes get.
func WithRegisteredAgent(name string, a registry.Agent) Option {
	return func(c *config) { c.agents[name] = a }
}

// WithBuiltinAgent registers an ACP agent that runs in-process: run reads
// the client's requests from stdin and writes to stdout.
func WithBuiltinAgent(name string, run coordinator.BuiltinAgent) Option {
	return func(c *config) { c.builtins[name] = run }
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
	st, err := boltstore.Open(filepath.Join(s.cfg.dataDir, "sparkles.db"), boltstore.Options{Logger: s.cfg.logger})
	if err != nil {
		return err
	}
	co, err := coordinator.New(coordinator.Config{
		Store:           st,
		DataDir:         s.cfg.dataDir,
		Agents:          maps.Clone(s.cfg.agents),
		Builtins:        maps.Clone(s.cfg.builtins),
		DefaultAgent:    s.cfg.defaultAgent,
		ApprovalTimeout: s.cfg.approval,
		TurnTimeout:     s.cfg.turn,
		FlushInterval:   s.cfg.flush,
		Logger:          s.cfg.logger,
	})
	if err != nil {
		st.Close()
		return err
	}
	if err := co.Recover(context.Background()); err != nil {
		co.Close()
		st.Close()
		return err
	}
	srv := server.New(server.Config{Backend: co, Token: s.cfg.token, Keepalive: s.cfg.keepalive, Logger: s.cfg.logger})
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		co.Close()
		st.Close()
		return err
	}
	// A restart listens on the port the first start was given, so clients
	// keep their URL.
	s.addr = l.Addr().String()
	in := &instance{store: st, coord: co, srv: srv, done: make(chan error, 1)}
	go func() { in.done <- srv.Serve(l) }()
	s.mu.Lock()
	s.run = in
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := []error{in.srv.Shutdown(ctx), <-in.done, in.coord.Close(), in.store.Close()}
	if err := errors.Join(errs...); err != nil {
		s.tb.Errorf("sparklestest: stop server: %v", err)
	}
}

// Prune removes every event of a sandbox's log with an id <= through, as
// the retention loop does, so a test can see what its client does with a
// cursor that retention has passed.
func (s *Server) Prune(sandboxID string, through uint64) {
	s.tb.Helper()
	in := s.running()
	if _, err := in.store.Prune(context.Background(), sandboxID, through, 0); err != nil {
		s.tb.Fatalf("sparklestest: prune %s through %d: %v", sandboxID, through, err)
	}
}

// Coordinator returns the running coordinator, for tests that append
// events of their own (Coordinator.AppendEvents) instead of running agents.
func (s *Server) Coordinator() *coordinator.Coordinator {
	s.tb.Helper()
	return s.running().coord
}

func (s *Server) running() *instance {
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
