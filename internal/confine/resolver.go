package confine

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// systemdUpstream is where systemd-resolved writes the servers it asks:
// what Docker and Podman give a container whose host resolves through
// resolved's stub on 127.0.0.53.
const systemdUpstream = "/run/systemd/resolve/resolv.conf"

// upstreamResolver says what an agent with network open should read as
// its resolv.conf: when the host's (conf) names only loopback servers,
// which the agent's network namespace cannot reach, the upstream file
// (upstream) if that names a server it can; with the path the agent's
// /etc/resolv.conf leads to, where it is shown. "" when the host's file
// serves as it is, or nothing better is known (a resolver of another
// kind on loopback: the agent's lookups then fail, as the docs say).
func upstreamResolver(conf, upstream string) (file, at string) {
	b, err := os.ReadFile(conf)
	if err != nil || !loopbackOnly(b) {
		return "", ""
	}
	u, err := os.ReadFile(upstream)
	if err != nil || loopbackOnly(u) {
		return "", ""
	}
	at, err = filepath.EvalSymlinks(conf)
	if err != nil {
		return "", ""
	}
	return upstream, at
}

// loopbackOnly reports whether a resolv.conf names servers and all of
// them are loopback addresses.
func loopbackOnly(conf []byte) bool {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(conf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		addr, err := netip.ParseAddr(strings.Split(f[1], "%")[0])
		if err != nil || !addr.IsLoopback() {
			return false
		}
		n++
	}
	return n > 0
}
