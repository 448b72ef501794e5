//go:build linux

package confine_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/loopback"
	"github.com/sparkles-dev/sparkles/internal/nobody"
)

// dialVar makes the test binary a client that dials each address it names
// (comma-separated), reads one line from each, and prints what became of
// them as JSON: what a confined agent reaches.
const dialVar = "SPARKLES_CONFINE_TEST_DIAL"

func init() {
	if addrs := os.Getenv(dialVar); addrs != "" {
		out := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, a := range strings.Split(addrs, ",") {
			wg.Go(func() {
				line := dialLine(a) // at once: a dropped SYN costs its timeout
				mu.Lock()
				out[a] = line
				mu.Unlock()
			})
		}
		wg.Wait()
		json.NewEncoder(os.Stdout).Encode(out)
		os.Exit(0)
	}
}

// dialLine is the first line the server at addr sends, or "error: …".
func dialLine(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// dialConfined runs the dialing client confined by l, with what its
// registry entry adds, and returns what it reached of addrs.
func dialConfined(t *testing.T, l *confine.Launcher, extra agent.Confinement, base, name string, addrs ...string) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sb := sandboxDir(t, base, name)
	cmd := exec.Command(exe)
	cmd.Dir = filepath.Join(sb, "work")
	cmd.Env = []string{dialVar + "=" + strings.Join(addrs, ",")}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	release, err := l.Start(cmd, sb, extra)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	err = cmd.Wait()
	release()
	out := buf.String()
	if err != nil {
		t.Fatalf("the confined client: %v\n%s", err, out)
	}
	got := map[string]string{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("the confined client said %q: %v", out, err)
	}
	return got
}

// TestHostPorts: an agent reaches the host ports it is given, by the
// server or by its registry entry, at the same ports of its own 127.0.0.1
// and ::1, in both networks, and nothing else of the host's loopback: not
// another listener there, not a port given to another agent. As root, it
// runs again as nobody: the launcher then listens in a user namespace
// that is not root's.
func TestHostPorts(t *testing.T) {
	alsoAsNobody(t, "TestHostPorts")
	base := os.Getenv(asUserVar)
	if base == "" {
		base = varTmp(t)
	}
	given, other, perAgent := loopback.Greeter(t, "given"), loopback.Greeter(t, "other"), loopback.Greeter(t, "per-agent")
	p := strconv.Itoa
	for _, network := range []string{confine.NetworkNone, confine.NetworkOpen} {
		t.Run(network, func(t *testing.T) {
			if network == confine.NetworkOpen {
				requirePasta(t)
			}
			data := filepath.Join(base, "data-"+network)
			os.MkdirAll(data, 0o700)
			l := newLauncher(t, confine.Options{DataDir: data, Network: network, HostPorts: []int{given}})
			addrs := []string{"127.0.0.1:" + p(given), "[::1]:" + p(given), "127.0.0.1:" + p(other), "127.0.0.1:" + p(perAgent), "[::1]:" + p(perAgent)}
			for _, c := range []struct {
				name  string
				extra agent.Confinement
				want  map[string]string
			}{
				{"c_server", agent.Confinement{}, map[string]string{addrs[0]: "given", addrs[1]: "given"}},
				{"c_own", agent.Confinement{HostPorts: []int{perAgent}}, map[string]string{addrs[0]: "given", addrs[1]: "given", addrs[3]: "per-agent", addrs[4]: "per-agent"}},
			} {
				got := dialConfined(t, l, c.extra, data, c.name, addrs...)
				for _, addr := range addrs {
					line := got[addr]
					if w := c.want[addr]; w != "" && line != w {
						t.Errorf("%s %s: %q, want %q from the host's port", c.name, addr, line, w)
					}
					if c.want[addr] == "" && !strings.HasPrefix(line, "error:") {
						t.Errorf("%s %s: %q: the agent reached a port of the host's loopback it was not given", c.name, addr, line)
					}
				}
			}
		})
	}
}

// requirePasta skips where pasta is not installed, except in CI, which
// installs it (.ci/run).
func requirePasta(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("pasta"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pasta is not installed: apt-get install passt")
		}
		t.Skip("pasta is not installed: apt-get install passt")
	}
}

// alsoAsNobody, run as root, runs the test named again in this test
// binary as nobody, as a subtest, with a directory of nobody's as
// asUserVar; the root run goes on.
func alsoAsNobody(t *testing.T, name string, env ...string) {
	t.Helper()
	if os.Getuid() != 0 || os.Getenv(asUserVar) != "" {
		return
	}
	t.Run("nobody", func(t *testing.T) { rerunAsNobody(t, name, env...) })
}

func rerunAsNobody(t *testing.T, name string, env ...string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(hostile), "confine-"+name+".test") // world-readable: made by TestMain
	if err := nobody.CopyExe(exe, bin); err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("/var/tmp", "confine-nobody-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	defer os.RemoveAll(work)
	os.Chown(work, 65534, 65534)
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Dir = work
	cmd.Env = append([]string{asUserVar + "=" + work, hostileVar + "=" + hostile, "PATH=" + os.Getenv("PATH"), "HOME=" + work, "TMPDIR=" + work}, env...)
	if os.Getenv("CI") != "" {
		cmd.Env = append(cmd.Env, "CI="+os.Getenv("CI"))
	}
	asNobody(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: "+name)) {
		t.Fatalf("as nobody: %v\n%s", err, out.String())
	}
	t.Log(out.String())
}

// asNobody makes cmd, a command of root's, run as nobody. Where this
// machine keeps the tun device root's (distributions make it 0666, and
// pasta as nobody needs it so), cmd gets one as distributions have it, in
// a mount namespace of its own.
func asNobody(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 == 0o006 {
		return
	}
	sh := `set -e; mount --make-rslave /; d=$(mktemp -d); mount -t tmpfs tmpfs "$d"
mknod -m 666 "$d/tun" c 10 200; mount --bind "$d/tun" /dev/net/tun
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`
	cmd.Args = append([]string{"/bin/sh", "-c", sh, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
}
