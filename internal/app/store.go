package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The store's opening: the bbolt file in the data dir, kept from a start
// that would forget its sandboxes, or NATS JetStream and the cluster of
// coordinators sharing it.

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
