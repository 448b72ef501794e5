// Package natstest runs a real NATS server with JetStream inside a test
// process, so the stores and coordinators built on JetStream can be tested
// against the real thing on the loopback interface, with no external
// process to install or start.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config tunes RunServerConfig. Zero values take the defaults.
type Config struct {
	// Dir is where JetStream stores (default a fresh tb.TempDir()).
	Dir string
	// SyncInterval, when set, makes the server sync its files on that
	// interval, its own default, instead of before every acknowledgement.
	// Only benchmarks that compare the two want it.
	SyncInterval time.Duration
	// NoJetStream runs the server without JetStream, as a misconfigured
	// deployment would.
	NoJetStream bool
	// Port is the client port (default a free one). A test that stops a
	// server and starts another on the same Dir and Port sees its clients
	// reconnect, as to a server that restarted.
	Port int
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
	if cfg.Port == 0 {
		cfg.Port = server.RANDOM_PORT
	}
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      cfg.Port,
		JetStream: !cfg.NoJetStream,
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

// Cluster is a JetStream cluster of servers, each a process of its own:
// this test binary started again as one server (see member.go). Out of
// the test process, the race detector's reports on the servers' own code
// do not fail the tests of the code that uses them: nats-server v2.15
// has such a race (a stream's expected-subject-sequence map, made by a new
// leader's first publish that expects one while it applies entries, is
// tested for nil without the lock), which failed replicated-stream tests
// under -race now and then. In production the server is a process of its
// own too.
type Cluster struct {
	tb      testing.TB
	specs   []memberSpec
	members []*member // nil while stopped
	urls    []string  // each server's client URL, the last it had
}

// RunCluster starts n NATS servers with JetStream that form one cluster on
// 127.0.0.1, and waits until its JetStream has a meta leader and every
// server knows every peer, so a stream with n replicas can be created.
// Each server is shut down by tb.Cleanup.
//
// One cluster runs at a time on the machine: go test runs packages in
// parallel, and two clusters of three servers electing leaders under -race
// on two cores missed their elections' timeouts (a stream that found no
// leader, a replica read before it caught up). RunCluster waits for the
// lock (a file in the temporary directory, locked with flock) and holds
// it until the test ends.
func RunCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	lockClusters(tb)
	c := &Cluster{tb: tb}
	tb.Cleanup(func() { c.shutdown() })
	// A clustered server needs its routes at start, so the cluster ports
	// are chosen first: free ones, taken by the servers a moment later.
	// Another test may take one meanwhile, and the server that wanted it
	// never listens: the cluster is then made again on other ports.
	for attempt := 1; ; attempt++ {
		addrs, routes := make([]string, n), make([]string, n)
		for i := range routes {
			addrs[i] = freeAddr(tb)
			routes[i] = "nats-route://" + addrs[i]
		}
		c.specs, c.members, c.urls = nil, make([]*member, n), make([]string, n)
		for i := range n {
			_, port, _ := net.SplitHostPort(addrs[i])
			cport, _ := strconv.Atoi(port)
			c.specs = append(c.specs, memberSpec{Name: fmt.Sprintf("s%d", i+1), ClusterPort: cport, Routes: routes, StoreDir: tb.TempDir()})
		}
		ready := true
		for i := range n {
			if err := c.start(i); err != nil {
				tb.Logf("nats cluster: server %d: %v", i+1, err)
				ready = false
				break
			}
		}
		if ready {
			break
		}
		c.shutdown()
		if attempt == 3 {
			tb.Fatal("nats server: not ready for connections within 20s, three times on fresh ports")
		}
		tb.Logf("nats cluster: a server did not listen within 20s (a port taken meanwhile?); again on other ports")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.formed() {
		if time.Now().After(deadline) {
			tb.Fatalf("nats cluster: %d servers did not form a JetStream cluster within 30s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// formed reports whether the running servers have a meta leader that
// counts every server as a peer, and every one of them is current with it.
func (c *Cluster) formed() bool {
	leader := false
	for _, m := range c.members {
		if m == nil {
			continue
		}
		st, err := m.state()
		if err != nil || !st.Current {
			return false
		}
		if st.Leader {
			leader = st.Peers == len(c.members)
		}
	}
	return leader
}

// URL is the client URL of every server, comma-separated, as a client that
// fails over between them is given it.
func (c *Cluster) URL() string {
	return strings.Join(c.urls, ",")
}

// start starts server i with its spec and waits until it takes
// connections.
func (c *Cluster) start(i int) error {
	m, err := startMember(c.specs[i])
	if err != nil {
		return err
	}
	c.members[i], c.urls[i] = m, m.url
	return nil
}

// shutdown stops every server of the cluster and waits for each.
func (c *Cluster) shutdown() {
	for i := range c.members {
		if c.members[i] != nil {
			c.Stop(i)
		}
	}
}

// Restart starts server i again after Stop, on its cluster port and its
// store directory, as when its machine comes back, and waits until it
// takes connections.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	if err := c.start(i); err != nil {
		c.tb.Fatalf("nats server: %v", err)
	}
}

// Stop shuts server i down and waits, as when its machine goes away.
func (c *Cluster) Stop(i int) {
	if out := c.members[i].stop(); out != "" {
		c.tb.Logf("nats server %d wrote on its standard error (not a failure of this test):\n%s", i+1, out)
	}
	c.members[i] = nil
}

// StreamLeader returns the index of the server that leads the stream
// named name in the account of the clients, or -1.
func (c *Cluster) StreamLeader(name string) int {
	for i, m := range c.members {
		if m != nil && m.leads(name) {
			return i
		}
	}
	return -1
}

// lockClusters takes the machine's cluster lock until tb ends.
func lockClusters(tb testing.TB) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sparkles-natstest-cluster.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		tb.Fatalf("nats cluster lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Fatalf("nats cluster lock: %v", err)
	}
	// Registered first, so it runs after the servers' shutdowns.
	tb.Cleanup(func() { f.Close() })
}

// JetStream is a plain client of the server at url, closed when tb ends,
// to do what a store or node of another process (or a crashed one) would
// have done, or to look at what they did.
func JetStream(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// CheckReplicas fails tb unless each of the named streams at url (a
// key-value bucket's is KV_<bucket>) has want replicas.
func CheckReplicas(tb testing.TB, url string, want int, streams ...string) {
	tb.Helper()
	js := JetStream(tb, url)
	for _, name := range streams {
		// A cluster of three that made its streams a moment ago may still
		// be electing their leaders, and an info request then times out:
		// it is asked again until it answers or 30 s went by.
		deadline := time.Now().Add(30 * time.Second)
		var st jetstream.Stream
		var err error
		for {
			if st, err = js.Stream(context.Background(), name); err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) || time.Now().After(deadline) {
				break
			}
			tb.Logf("stream %s: %v; asking again", name, err)
		}
		if err != nil {
			tb.Fatalf("stream %s: %v", name, err)
		}
		if got := st.CachedInfo().Config.Replicas; got != want {
			tb.Fatalf("stream %s has %d replicas, want %d", name, got, want)
		}
	}
}
