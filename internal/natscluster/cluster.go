package natscluster

import (
	"context"
	"encoding/json"
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
	"github.com/sparkles-dev/sparkles/sandbox"
)

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

// liveNode is a node instance seen live, trusted until a short while later.
type liveNode struct {
	instance string
	url      string // its API, as its key had it
	until    time.Time
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

func (c *Cluster) record(instance string) []byte {
	c.mu.Lock()
	api := c.apiURL
	c.mu.Unlock()
	b, _ := json.Marshal(nodeRecord{Node: c.node, Instance: instance, APIURL: api, TTLMillis: c.ttl.Milliseconds(), Renewed: time.Now().UTC()})
	return b
}

// register writes this node's key under a new instance. A key of a live
// node of the same name is left alone; one of this node's own earlier
// instance (it lapsed here, not yet on the server) is replaced, which ends
// that instance's leases at once. A new instance holds nothing yet: once
// the store's fences are this node's (after Join), re-registering drops
// them all.
func (c *Cluster) register(ctx context.Context) error {
	c.mu.Lock()
	prev := c.instance
	c.mu.Unlock()
	inst := sandbox.NewID("inst_")
	start := time.Now()
	rev, err := c.nodes.Create(ctx, c.node, c.record(inst))
	if errors.Is(err, jetstream.ErrKeyExists) {
		kve, gerr := c.nodes.Get(ctx, c.node)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			rev, err = c.nodes.Create(ctx, c.node, c.record(inst))
		case gerr != nil:
			return fmt.Errorf("cluster: read node key %s: %w", c.node, gerr)
		default:
			var rec nodeRecord
			if json.Unmarshal(kve.Value(), &rec) != nil || prev == "" || rec.Instance != prev {
				return fmt.Errorf("%w: %s (a stopped node's key expires %s after its last renewal)", ErrNodeInUse, c.node, c.ttl)
			}
			rev, err = c.nodes.Update(ctx, c.node, c.record(inst), kve.Revision())
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: register node %s: %w", c.node, err)
	}
	c.mu.Lock()
	c.instance, c.rev, c.until = inst, rev, start.Add(c.ttl-c.margin)
	clear(c.owned)
	fences := c.fences
	c.mu.Unlock()
	if fences != nil {
		fences.LoseAll()
	}
	return nil
}

// Renew renews this node's key. See cluster.Cluster.
func (c *Cluster) Renew(ctx context.Context) (time.Time, error) {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	c.mu.Lock()
	inst, rev, until, closed := c.instance, c.rev, c.until, c.closed
	c.mu.Unlock()
	if closed {
		return time.Time{}, errors.New("cluster: this node left the cluster")
	}
	if rev == 0 {
		if err := c.register(ctx); err != nil {
			return time.Time{}, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.until, nil
	}
	start := time.Now()
	if !start.Before(until) {
		c.lapse(inst)
		return until, cluster.ErrLeaseLost
	}
	newRev, err := c.nodes.Update(ctx, c.node, c.record(inst), rev)
	switch {
	case isConflict(err):
		// The key expired (and maybe another process took the name).
		c.lapse(inst)
		return until, cluster.ErrLeaseLost
	case err != nil:
		return until, fmt.Errorf("cluster: renew node %s: %w", c.node, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.instance == inst && c.rev == rev {
		c.rev, c.until = newRev, start.Add(c.ttl-c.margin)
	}
	return c.until, nil
}

// lapse forgets the leases of instance inst, and the store its holds on
// their logs, so that nothing more is written to them from here.
func (c *Cluster) lapse(inst string) {
	c.mu.Lock()
	lapsed := c.instance == inst
	if lapsed {
		c.rev = 0
		clear(c.owned)
	}
	c.mu.Unlock()
	if lapsed {
		c.fences.LoseAll()
	}
}

// held returns this node's instance if its leases hold now.
func (c *Cluster) held() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instance, c.rev != 0 && time.Now().Before(c.until)
}

// leasesHold reports whether this node's leases hold now: the hook the
// store asks before a fenced append.
func (c *Cluster) leasesHold() bool {
	_, ok := c.held()
	return ok
}

// Holds reports, from memory, whether this node holds the lease of
// sandbox id now: its leases hold and it claimed that one.
func (c *Cluster) Holds(id string) bool {
	if _, ok := c.held(); !ok {
		return false
	}
	c.mu.Lock()
	_, mine := c.owned[id]
	c.mu.Unlock()
	return mine && c.fences.Holding(id)
}

// errLapsed is a claim while this node's leases have lapsed: it could not
// renew them, NATS being unreachable (or the process paused), and holds
// no sandbox until it registers again.
var errLapsed = sandbox.Errorf(sandbox.EUnavailable,
	"this node's leases have lapsed: NATS did not answer their renewals in time; it takes sandboxes again once NATS answers; try again shortly")

// Ready reports whether this node's leases hold now: it is registered and
// renewed them within the TTL, so it can run sandboxes. A node that lost
// NATS stops being ready before another may take its sandboxes.
func (c *Cluster) Ready() error {
	if _, ok := c.held(); !ok {
		return fmt.Errorf("node %s holds no leases: its renewals in NATS did not succeed in time", c.node)
	}
	return nil
}

// Claim takes or looks up the lease of a sandbox. See cluster.Cluster.
//
// While NATS is known unreachable, or this node's leases lapsed (its
// renewals got no answer), it fails at once as unavailable; a claim whose
// requests get no answer fails as unavailable too.
func (c *Cluster) Claim(ctx context.Context, id string) (_ cluster.Claim, err error) {
	if !validID(id) {
		return cluster.Claim{}, notFound(id)
	}
	inst, ok := c.held()
	if !ok {
		return cluster.Claim{}, errLapsed
	}
	c.mu.Lock()
	_, mine := c.owned[id]
	c.mu.Unlock()
	if mine && c.fences.Holding(id) {
		return cluster.Claim{Owner: c.node}, nil
	}
	if err := c.store.Unreachable(); err != nil {
		return cluster.Claim{}, err
	}
	caller := ctx
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	// Its reads are given up as soon as NATS is found unreachable, its
	// writes a little later, as the store's are (see natsstore's reach.go).
	rctx, cut := c.store.CutOff(ctx)
	defer cut()
	ctx, cutWrites := c.store.CutOffWrites(ctx)
	defer cutWrites()
	// rctx is cut off first, whichever request NATS left unanswered.
	defer func() { err = c.store.Classify(caller, rctx, err) }()
	mineNow := string(c.leaseValue(inst))
	for attempt := 1; ; attempt++ {
		var rev uint64
		kve, err := c.leases.Get(rctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err = c.leases.Create(ctx, id, []byte(mineNow))
		case err != nil:
			return cluster.Claim{}, fmt.Errorf("cluster: read lease of %s: %w", id, err)
		default:
			var rec nodeRecord
			if json.Unmarshal(kve.Value(), &rec) == nil {
				if rec.Node == c.node && rec.Instance == inst {
					// Held by this instance already; its fence may not be
					// up yet (an earlier claim failed half-way).
					if err := c.fence(ctx, inst, id); err != nil {
						return cluster.Claim{}, err
					}
					c.own(inst, id, kve.Revision())
					return cluster.Claim{Owner: c.node}, nil
				}
				live, lerr := c.isLive(rctx, rec.Node, rec.Instance)
				if lerr != nil {
					return cluster.Claim{}, lerr
				}
				if live {
					return cluster.Claim{Owner: rec.Node}, nil
				}
			}
			rev, err = c.leases.Update(ctx, id, []byte(mineNow), kve.Revision())
		}
		if err == nil {
			// The lease is this node's; before it writes, the fence shuts
			// out the writes of the one before it.
			if err := c.fence(ctx, inst, id); err != nil {
				return cluster.Claim{}, err
			}
			c.own(inst, id, rev)
			return cluster.Claim{Owner: c.node, Taken: true}, nil
		}
		if !isConflict(err) || attempt == maxConflicts {
			return cluster.Claim{}, fmt.Errorf("cluster: take lease of %s: %w", id, err)
		}
		natsstore.Backoff(ctx, attempt) // another node wrote the lease meanwhile: look again
	}
}

// fence puts up this instance's fence on the log of sandbox id, unless it
// holds one already.
func (c *Cluster) fence(ctx context.Context, inst, id string) error {
	if c.fences.Holding(id) {
		return nil
	}
	if _, err := c.fences.Hold(ctx, id, c.leaseValue(inst)); err != nil {
		return fmt.Errorf("cluster: fence the log of %s: %w", id, err)
	}
	return nil
}

func (c *Cluster) leaseValue(inst string) []byte {
	b, _ := json.Marshal(nodeRecord{Node: c.node, Instance: inst})
	return b
}

func (c *Cluster) own(inst, id string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.instance == inst && c.rev != 0 {
		c.owned[id] = rev
	}
}

// isLive reports whether instance inst of node is registered. A live answer
// is remembered for a moment (TTL/4), which only ever delays a takeover; a
// gone one is never remembered.
func (c *Cluster) isLive(ctx context.Context, node, inst string) (bool, error) {
	now := time.Now()
	c.mu.Lock()
	m, ok := c.alive[node]
	c.mu.Unlock()
	if ok && m.instance == inst && now.Before(m.until) {
		return true, nil
	}
	if !validToken(node) {
		return false, nil
	}
	kve, err := c.nodes.Get(ctx, node)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: read node key %s: %w", node, err)
	}
	var rec nodeRecord
	if json.Unmarshal(kve.Value(), &rec) != nil || rec.Instance != inst {
		return false, nil
	}
	c.mu.Lock()
	c.alive[node] = liveNode{instance: inst, url: rec.APIURL, until: now.Add(c.ttl / 4)}
	c.mu.Unlock()
	return true, nil
}

// Release deletes this node's lease of a sandbox, if it holds it.
func (c *Cluster) Release(ctx context.Context, id string) (err error) {
	c.mu.Lock()
	rev, ok := c.owned[id]
	delete(c.owned, id)
	c.mu.Unlock()
	c.fences.Lose(id)
	if !ok {
		return nil
	}
	if err := c.store.Unreachable(); err != nil {
		return err
	}
	caller := ctx
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	ctx, cut := c.store.CutOffWrites(ctx)
	defer cut()
	defer func() { err = c.store.Classify(caller, ctx, err) }()
	err = c.leases.Delete(ctx, id, jetstream.LastRevision(rev))
	if isConflict(err) {
		return nil // taken over meanwhile: not ours to delete
	}
	return err
}

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
