package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/cluster"
)

// A sandbox's workspace is on the disk of the node that runs it, and its
// byte streams (a file, an archive of gigabytes) do not fit NATS messages:
// the other nodes proxy those requests to that node's HTTP API. So each
// node records the URL of its API in its node key, beside its instance.

// CheckAPIURL checks a node's API URL and returns it in the form the node
// key records: http or https, a host, no credentials, path, query or
// fragment, no trailing slash.
func CheckAPIURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("API URL %q: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("API URL %q: want http://HOST:PORT or https://HOST:PORT", raw)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("API URL %q: it names no host", raw)
	case u.User != nil:
		return "", fmt.Errorf("API URL %q: credentials do not belong in it (nodes send the request's own token)", u.Redacted())
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", fmt.Errorf("API URL %q: want the server's base URL only, without a path, query or fragment", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Advertise records apiURL as this node's API URL (see Options.APIURL)
// and writes the node key at once, so that other nodes can reach the API
// from now on rather than from the next renewal.
func (c *Cluster) Advertise(ctx context.Context, apiURL string) error {
	u, err := CheckAPIURL(apiURL)
	if err != nil {
		return err
	}
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	c.mu.Lock()
	c.apiURL = u
	inst, rev := c.instance, c.rev
	c.mu.Unlock()
	if rev == 0 {
		return nil // not registered now: the next registration records it
	}
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	newRev, err := c.nodes.Update(ctx, c.node, c.record(inst), rev)
	if isConflict(err) {
		// The key expired; the next Renew finds out, tells the
		// coordinator, and registers again with the URL.
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: record the API URL of node %s: %w", c.node, err)
	}
	c.mu.Lock()
	if c.instance == inst && c.rev == rev {
		c.rev = newRev
	}
	c.mu.Unlock()
	return nil
}

// NodeURL returns the API URL that live node recorded. See
// cluster.Cluster. A node not registered fails with an error wrapping
// cluster.ErrUnreachable. The answer is remembered for a moment (TTL/4),
// as isLive's: a node that went meanwhile fails the request sent to it,
// which is answered as unavailable.
func (c *Cluster) NodeURL(ctx context.Context, node string) (string, error) {
	if node == c.node {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.apiURL == "" {
			return "", fmt.Errorf("cluster: node %s advertises no API URL yet", node)
		}
		return c.apiURL, nil
	}
	if !validToken(node) {
		return "", fmt.Errorf("cluster: invalid node name %q", node)
	}
	now := time.Now()
	c.mu.Lock()
	m, ok := c.alive[node]
	c.mu.Unlock()
	if ok && m.url != "" && now.Before(m.until) {
		return m.url, nil
	}
	ctx, cancel := opCtx(ctx, c.timeout)
	defer cancel()
	kve, err := c.nodes.Get(ctx, node)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", fmt.Errorf("cluster: node %s is not registered: %w", node, cluster.ErrUnreachable)
	}
	if err != nil {
		return "", fmt.Errorf("cluster: read node key %s: %w", node, err)
	}
	var rec nodeRecord
	if err := json.Unmarshal(kve.Value(), &rec); err != nil {
		return "", fmt.Errorf("cluster: node key %s: %w", node, err)
	}
	if rec.APIURL == "" {
		return "", fmt.Errorf("cluster: node %s advertises no API URL (it is not serving yet, or runs a version of sparkles without --advertise-url)", node)
	}
	c.mu.Lock()
	c.alive[node] = liveNode{instance: rec.Instance, url: rec.APIURL, until: now.Add(c.ttl / 4)}
	c.mu.Unlock()
	return rec.APIURL, nil
}
