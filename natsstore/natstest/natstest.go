// Package natstest runs a real NATS server with JetStream inside a test
// process, so the stores and coordinators built on JetStream can be tested
// against the real thing on the loopback interface, with no external
// process to install or start.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config tunes RunServerConfig. Zero values take the defaults.
type Config struct {
	// Dir is where JetStream stores (default a fresh tb.TempDir()).
	Dir string
	// SyncInterval, when set, makes the server sync its files on that
	// interval, its own default, instead of before every acknowledgement.
	// Only benchmarks that compare the two want it.
	SyncInterval time.Duration
}

// RunServer starts a NATS server with JetStream on a fresh directory in
// tb.TempDir and returns its client URL. stop shuts it down and waits; it
// is also run by tb.Cleanup, and running it twice is harmless.
func RunServer(tb testing.TB) (url string, stop func()) {
	tb.Helper()
	return RunServerConfig(tb, Config{})
}

// RunServerDir starts a NATS server with JetStream storing in dir. A test
// that stops a server and starts another on the same dir sees what the
// first one made durable, as after a restart. The new server listens on a
// new port, so take its URL.
func RunServerDir(tb testing.TB, dir string) (url string, stop func()) {
	tb.Helper()
	return RunServerConfig(tb, Config{Dir: dir})
}

// RunServerConfig starts a NATS server with JetStream as cfg says, on
// 127.0.0.1 and a free port, without logging or signal handlers.
func RunServerConfig(tb testing.TB, cfg Config) (url string, stop func()) {
	tb.Helper()
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  cfg.Dir,
		// An acknowledged publish is on disk, as the store's contract
		// requires: the server's default syncs on an interval.
		SyncAlways: cfg.SyncInterval == 0,
		NoLog:      true,
		NoSigs:     true,
		// Without a limit JetStream reserves a share of the machine's
		// memory and disk; tests need little.
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	}
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatal("nats server: not ready for connections within 10s")
	}
	stop = func() {
		s.Shutdown()
		s.WaitForShutdown()
	}
	tb.Cleanup(stop)
	return s.ClientURL(), stop
}
