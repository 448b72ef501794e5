package confine

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUpstreamResolver: a host that resolves through a stub on its own
// loopback (systemd-resolved's 127.0.0.53) gives an agent with network
// open the upstream servers instead; any other host's file stays.
func TestUpstreamResolver(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stub := write("stub-resolv.conf", "# stub\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n")
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.Symlink("stub-resolv.conf", conf); err != nil {
		t.Fatal(err)
	}
	upstream := write("upstream.conf", "nameserver 192.0.2.1\nnameserver 2001:db8::1\n")
	if file, at := upstreamResolver(conf, upstream); file != upstream || at != stub {
		t.Errorf("stub host: %q at %q, want %q at %q", file, at, upstream, stub)
	}
	for name, body := range map[string]string{
		"a server off loopback": "nameserver 192.0.2.53\n",
		"mixed":                 "nameserver 127.0.0.53\nnameserver 192.0.2.53\n",
		"no server":             "search lan\n",
	} {
		c := write("c.conf", body)
		if file, _ := upstreamResolver(c, upstream); file != "" {
			t.Errorf("%s: %q, want the host's file kept", name, file)
		}
	}
	loopUp := write("loop-up.conf", "nameserver ::1\n")
	if file, _ := upstreamResolver(conf, loopUp); file != "" {
		t.Errorf("an upstream on loopback too: %q, want nothing", file)
	}
	if file, _ := upstreamResolver(conf, filepath.Join(dir, "missing")); file != "" {
		t.Errorf("no upstream file: %q, want nothing", file)
	}
}
