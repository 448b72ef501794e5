//go:build linux

package confine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/confine"
	"golang.org/x/sys/unix"
)

// TestDataDirInSystemDir: a data dir inside a directory every agent reads
// (/opt/sparkles, as a package might put it) is covered in the agent's
// view: its token is not there, its own sandbox is.
func TestDataDirInSystemDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("making a directory in /opt needs root (CI runs as root)")
	}
	base, err := os.MkdirTemp("/opt", "sparkles-confine-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755) // as a package's directory would be
	data := filepath.Join(base, "data")
	work := filepath.Join(data, "sandboxes", "c_opt", "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o755) // loose, so that only the cover keeps the token away
	token := filepath.Join(data, "token")
	if err := os.WriteFile(token, []byte("secret"), 0o644); err != nil { // readable by anyone who reaches it
		t.Fatal(err)
	}
	l := newLauncher(t, confine.Options{DataDir: data})
	out, err := runConfined(t, l, filepath.Dir(work), []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c",
		"if cat "+token+" 2>/dev/null; then echo read-token; fi; echo ok > w && cat w")
	if err != nil || strings.Contains(out, "read-token") || !strings.Contains(out, "ok") {
		t.Fatalf("confined: %v\n%s", err, out)
	}
}

// resolverVar tells the test binary, rerun in a mount namespace of its
// own, that it is that run (TestResolverStub).
const resolverVar = "SPARKLES_CONFINE_TEST_RESOLVER"

// TestResolverStub: on a host that resolves through systemd-resolved's
// stub (/etc/resolv.conf names 127.0.0.53, which an agent's network
// namespace cannot reach), an agent with network open reads resolved's
// upstream servers as its /etc/resolv.conf. The host is made so in a
// private mount namespace of a rerun of this test, as root.
func TestResolverStub(t *testing.T) {
	if os.Getenv(resolverVar) == "" {
		if os.Getuid() != 0 {
			t.Skip("the rerun needs a mount namespace of its own (root; CI runs as root)")
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^TestResolverStub$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), resolverVar+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: TestResolverStub") {
			t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
		}
		return
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	dir := "/run/systemd/resolve"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stub, upstream := filepath.Join(dir, "stub-resolv.conf"), filepath.Join(dir, "resolv.conf")
	os.WriteFile(stub, []byte("nameserver 127.0.0.53\n"), 0o644)
	os.WriteFile(upstream, []byte("nameserver 192.0.2.1\n"), 0o644)
	if err := unix.Mount(stub, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	for network, want := range map[string]string{confine.NetworkOpen: "192.0.2.1", confine.NetworkNone: "127.0.0.53"} {
		l := newLauncher(t, confine.Options{Network: network})
		out, err := runConfined(t, l, sandboxDir(t, varTmp(t), "resolver-"+network), []string{"PATH=/usr/bin:/bin"}, "/bin/cat", "/etc/resolv.conf")
		if err != nil || !strings.Contains(out, "nameserver "+want) {
			t.Errorf("network %s: /etc/resolv.conf reads %q (%v), want nameserver %s", network, out, err, want)
		}
	}
}
