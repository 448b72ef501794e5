package app

import (
	"context"
	"fmt"
	"net"
	"os"
)

// advertise records, on a NATS store, where the other coordinators reach
// this one's API: a sandbox's workspace is on the disk of the node that
// runs it, and they proxy its file, archive and diff requests there. An
// AdvertiseURL given is recorded when the node joins; the default is
// known only once the server listens (its port may be chosen then). A
// failed write is logged, not fatal: every renewal of the node's key
// writes the URL again.
func (m *Main) advertise(ctx context.Context, listening net.Addr) {
	if m.Cluster == nil {
		return
	}
	u := m.AdvertiseURL
	if u == "" {
		var err error
		if u, err = defaultAdvertiseURL(m.Addr, listening); err != nil {
			m.Logger.Warn("other coordinators cannot reach this one's API for the workspaces of its sandboxes; pass --advertise-url", "err", err)
			return
		}
		if err := m.Cluster.Advertise(ctx, u); err != nil {
			m.Logger.Warn("recording this node's API URL in NATS failed; its next lease renewal records it", "url", u, "err", err)
		}
	}
	m.Logger.Info("other coordinators reach this one's API at its advertised URL", "node", m.Cluster.Node(), "advertise_url", u)
}

// defaultAdvertiseURL is http:// and the address the server listens on
// when addr (--addr) names a host or an IP, else this machine's host name
// at the port it listens on: a wildcard address (":7410", "0.0.0.0:7410")
// is no address another machine can dial.
func defaultAdvertiseURL(addr string, listening net.Addr) (string, error) {
	_, port, err := net.SplitHostPort(listening.String())
	if err != nil {
		return "", err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil || host == "" {
			return "", fmt.Errorf("--addr %q listens on every interface and this machine's host name is unknown (%v)", addr, err)
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
