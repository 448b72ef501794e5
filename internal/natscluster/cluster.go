package natscluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
)

// The Cluster and its Options, joining and leaving: Join opens the node
// and lease buckets, registers the node and takes the store's fences;
// Close deletes the node's key.

var _ cluster.Cluster = (*Cluster)(nil)

// Defaults of Options.
const (
	DefaultNodeBucket  = "sparkles-nodes"
	DefaultLeaseBucket = "sparkles-leases"
	DefaultCallPrefix  = "sparkles.node"
	DefaultLeaseTTL    = 15 * time.Second
	DefaultCallTimeout = 30 * time.Second
)

// ErrNodeInUse is returned by Join when a live node has the name.
var ErrNodeInUse = errors.New("a live node already has this name")

// Options tune a Cluster. Zero values take the defaults.
type Options struct {
	// Node is this node's name: letters, digits, - and _ (default the
	// host name and the process id).
	Node string
	// LeaseTTL is how long a node's leases outlive its last renewal
	// (default 15s). It is the node bucket's TTL, so the node that creates
	// the bucket sets it for all; a node asking for another one is told in
	// the log and uses the bucket's.
	LeaseTTL time.Duration
	// NodeBucket keeps one key per live node, which expires LeaseTTL after
	// its last renewal (default sparkles-nodes).
	NodeBucket string
	// LeaseBucket keeps, per sandbox, the node that holds it (default
	// sparkles-leases).
	LeaseBucket string
	// CallPrefix is the subject space of forwarded calls: node N listens on
	// <CallPrefix>.N.call (default sparkles.node).
	CallPrefix string
	// CallTimeout bounds a forwarded call that has no deadline of its own
	// (default 30s).
	CallTimeout time.Duration
	// Replicas of the two buckets when Join creates them (default 1); a
	// bucket that exists keeps its own.
	Replicas int
	// APIURL is the base URL at which the other nodes reach this node's
	// HTTP API (http://host:port), recorded in its node key for NodeURL.
	// Empty records none until Advertise gives one (a server that learns
	// its port only once it listens).
	APIURL string
	Logger *slog.Logger // default the store's
}

// Cluster is the NATS implementation of cluster.Cluster, on the
// connection of a natsstore.Store, whose fences it puts up (see doc.go).
//
// A node is live while its key in the node bucket exists. The bucket's TTL
// is the lease TTL: JetStream removes a key that long after its last
// write, on the server's clock alone, and the node renews its key every
// TTL/3 with a revision check. The key's value names the node and an
// instance, drawn afresh each time the node (re)registers.
//
// A sandbox's lease is its key in the lease bucket: the node and instance
// that hold it, with no expiry of its own. It holds while that instance is
// the one registered under a live node key. Taking a lease over is a
// revision-checked update of that key, so of two nodes that find the
// holder gone, one wins. Leases cost nothing to keep: one renewal per node
// keeps all of them.
//
// A node counts its leases as held until the moment it sent its last
// successful renewal, plus the TTL, minus a margin (TTL/5): the server
// cannot have removed the key before then, since it counts from when it
// received that renewal. So no two nodes' clocks need to agree, only to
// run at about the same rate.
type Cluster struct {
	nc          *nats.Conn
	fences      *natsstore.Fences
	store       *natsstore.Store // whose connection this speaks on: whether NATS answers
	timeout     time.Duration    // of a request without a deadline of its own: the store's
	nodes       jetstream.KeyValue
	leases      jetstream.KeyValue
	node        string
	ttl         time.Duration
	margin      time.Duration
	callPrefix  string
	callTimeout time.Duration
	log         *slog.Logger

	// renewMu orders the writes of this node's key (Renew, Advertise):
	// each is revision-checked, and one that lost to the other would take
	// the key for expired.
	renewMu sync.Mutex

	mu       sync.Mutex
	apiURL   string            // recorded in this node's key
	instance string            // of the current registration, or the last one
	rev      uint64            // revision of this node's key; 0 when not registered
	until    time.Time         // the leases surely hold until then (monotonic)
	owned    map[string]uint64 // sandbox id -> revision of its lease key, held by this instance
	alive    map[string]liveNode
	serving  *server
	closed   bool
}

// nodeRecord is the value of a node key and of a lease key.
type nodeRecord struct {
	Node     string `json:"node"`
	Instance string `json:"instance"`
	// APIURL is where the node serves its HTTP API (node keys only).
	APIURL string `json:"api_url,omitempty"`
	// TTLMillis and Renewed are for people reading the bucket.
	TTLMillis int64     `json:"ttl_ms,omitempty"`
	Renewed   time.Time `json:"renewed,omitzero"`
}

// Join registers this process as a node of the cluster sharing store s,
// creating the node and lease buckets if needed, and makes s write under
// the node's fences (natsstore.Store.Fences). It fails with ErrNodeInUse
// if a live node has the same name. Close leaves the cluster; the store's
// connection stays open.
func Join(ctx context.Context, s *natsstore.Store, opts Options) (*Cluster, error) {
	if opts.Node == "" {
		opts.Node = DefaultNodeName()
	}
	if !validToken(opts.Node) {
		return nil, fmt.Errorf("node name %q: use letters, digits, - and _ only", opts.Node)
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.NodeBucket == "" {
		opts.NodeBucket = DefaultNodeBucket
	}
	if opts.LeaseBucket == "" {
		opts.LeaseBucket = DefaultLeaseBucket
	}
	if opts.CallPrefix == "" {
		opts.CallPrefix = DefaultCallPrefix
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Replicas < 1 {
		opts.Replicas = natsstore.DefaultReplicas
	}
	if opts.APIURL != "" {
		u, err := CheckAPIURL(opts.APIURL)
		if err != nil {
			return nil, err
		}
		opts.APIURL = u
	}
	conn := s.Conn()
	if opts.Logger == nil {
		opts.Logger = conn.Logger
	}
	// The buckets are opened as the store opens its stream: each ask
	// bounded by the store's timeout, asked again while a cluster that has
	// just formed is not ready, up to its start timeout; the rest of the
	// join by the timeout alone.
	nodes, err := nodeBucket(ctx, s, opts)
	if err != nil {
		return nil, err
	}
	leases, err := s.Bucket(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.LeaseBucket,
		Description: "Sparkles sandbox leases: the node that runs each sandbox's agent",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	}, noTTL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := opCtx(ctx, conn.Timeout)
	defer cancel()
	st, err := nodes.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read key-value bucket %s: %w", opts.NodeBucket, err)
	}
	ttl := st.TTL()
	if ttl != opts.LeaseTTL {
		opts.Logger.Warn("cluster: the node bucket's TTL is the lease TTL of every node; using it",
			"bucket", opts.NodeBucket, "ttl", ttl, "asked", opts.LeaseTTL)
	}
	c := &Cluster{
		nc:          conn.NATS,
		store:       s,
		timeout:     conn.Timeout,
		nodes:       nodes,
		leases:      leases,
		node:        opts.Node,
		ttl:         ttl,
		margin:      ttl / 5,
		callPrefix:  opts.CallPrefix,
		callTimeout: opts.CallTimeout,
		log:         opts.Logger,
		apiURL:      opts.APIURL,
		owned:       map[string]uint64{},
		alive:       map[string]liveNode{},
	}
	if err := c.register(ctx); err != nil {
		return nil, err
	}
	// The seam with the store: from here on its appends are fenced, and
	// refused while this node's leases do not hold.
	c.fences = s.Fences(c.leasesHold)
	return c, nil
}

// nodeBucket opens the node bucket, creating it with the asked TTL if it
// does not exist. An existing bucket keeps its TTL: changing it under live
// nodes that renew on the old one would expire them.
func nodeBucket(ctx context.Context, s *natsstore.Store, opts Options) (jetstream.KeyValue, error) {
	return s.Bucket(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.NodeBucket,
		Description: "Sparkles coordinator nodes; a key expires when its node stops renewing it",
		History:     1,
		TTL:         opts.LeaseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	}, needTTL)
}

// DefaultNodeName is the host name and the process id, in the characters a
// node name may have.
func DefaultNodeName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	host = strings.Map(func(r rune) rune {
		if r < 0x80 && validTokenByte(byte(r)) {
			return r
		}
		return '-'
	}, host)
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !validTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func validTokenByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_'
}

// Node is this node's name.
func (c *Cluster) Node() string { return c.node }

// TTL is the lease TTL.
func (c *Cluster) TTL() time.Duration { return c.ttl }

// Close stops serving forwarded calls and deletes this node's key, so its
// leases are free at once instead of after the TTL. The coordinator should
// be closed first: it settles what it runs before the leases go.
func (c *Cluster) Close() error {
	c.mu.Lock()
	srv, rev := c.serving, c.rev
	c.serving, c.rev, c.closed = nil, 0, true
	clear(c.owned)
	c.mu.Unlock()
	c.fences.LoseAll()
	if srv != nil {
		srv.stop()
	}
	if rev == 0 {
		return nil
	}
	if err := c.store.Unreachable(); err != nil {
		// No use waiting for a timeout: the node key expires on its own.
		return fmt.Errorf("cluster: leave: %w (this node's leases lapse on their own within the TTL)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	err := c.nodes.Delete(ctx, c.node, jetstream.LastRevision(rev))
	if isConflict(err) {
		return nil
	}
	return err
}
