//go:build linux

package confine_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/loopback"
	"github.com/sparkles-dev/sparkles/internal/nobody"
	"golang.org/x/sys/unix"
)

// pastaVar carries the addresses of TestPastaOpen's network to its run
// inside it; listenVar makes the test binary an agent that listens on a
// port and waits for its stdin to close.
const (
	pastaVar     = "SPARKLES_CONFINE_TEST_PASTA"
	pastaFailVar = "SPARKLES_CONFINE_TEST_PASTA_FAILS"
	listenVar    = "SPARKLES_CONFINE_TEST_LISTEN"
)

func init() {
	if port := os.Getenv(listenVar); port != "" {
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "agent")
				c.Close()
			}
		}()
		fmt.Println("listening")
		bufio.NewReader(os.Stdin).ReadString('\n') // until the test is done
		os.Exit(0)
	}
}

// pastaNet is the network TestPastaOpen builds: a namespace that stands
// for the host (pasta runs there), with a veth to a namespace that stands
// for the rest of the world and is its default gateway, and a second
// address of the host's own.
type pastaNet struct {
	Host, Remote string // namespace names
	Gateway      string // the remote's address: the host's default route
	HostAddr     string // the host's veth address, which pasta copies
	OtherAddr    string // another address of the host's, which it does not

	RemotePort   int // the remote serves "remote" there
	LoopbackPort int // the host serves "host-loopback" on its 127.0.0.1 only
	AnyPort      int // the host serves "host-any" on all its addresses
}

// TestPastaOpen: with network open, an agent reaches the world through
// pasta and nothing of the host's loopback by any address (its own
// 127.0.0.1, the gateway's, the host's own addresses), and what it listens
// on is not exposed on the host. Everything runs in namespaces the test
// makes: pasta sees a host whose only way out is a veth to a namespace of
// the test's. As root and as nobody.
func TestPastaOpen(t *testing.T) {
	if env := os.Getenv(pastaVar); env != "" {
		var n pastaNet
		if err := json.Unmarshal([]byte(env), &n); err != nil {
			t.Fatal(err)
		}
		pastaInside(t, n)
		return
	}
	requirePasta(t)
	if os.Getuid() != 0 {
		t.Skip("makes network namespaces: run as root (CI does)")
	}
	n := newPastaNet(t)
	serveIn(t, n.Remote, net.JoinHostPort(n.Gateway, "0"), "remote", &n.RemotePort)
	serveIn(t, n.Host, "127.0.0.1:0", "host-loopback", &n.LoopbackPort)
	serveIn(t, n.Host, "0.0.0.0:0", "host-any", &n.AnyPort)
	for _, user := range []string{"root", "nobody"} {
		env, _ := json.Marshal(n)
		t.Run(user, func(t *testing.T) { runInNetns(t, n.Host, user, "TestPastaOpen", pastaVar+"="+string(env)) })
	}
}

// pastaInside is TestPastaOpen in the host namespace.
func pastaInside(t *testing.T, n pastaNet) {
	base := os.Getenv(asUserVar)
	data := filepath.Join(base, "data")
	os.MkdirAll(data, 0o700)
	l := newLauncher(t, confine.Options{DataDir: data, Network: confine.NetworkOpen})
	p := strconv.Itoa
	want := map[string]string{
		net.JoinHostPort(n.Gateway, p(n.RemotePort)):     "remote",   // the way out works
		net.JoinHostPort(n.OtherAddr, p(n.AnyPort)):      "host-any", // as from the network
		"127.0.0.1:" + p(n.LoopbackPort):                 "",
		net.JoinHostPort(n.Gateway, p(n.LoopbackPort)):   "",
		net.JoinHostPort(n.HostAddr, p(n.LoopbackPort)):  "",
		net.JoinHostPort(n.OtherAddr, p(n.LoopbackPort)): "",
	}
	var addrs []string
	for a := range want {
		addrs = append(addrs, a)
	}
	got := dialConfined(t, l, agent.Confinement{}, data, "c_pasta", addrs...)
	for _, a := range addrs {
		switch line := got[a]; {
		case want[a] != "" && line != want[a]:
			t.Errorf("%s: %q, want %q", a, line, want[a])
		case want[a] == "" && !strings.HasPrefix(line, "error:"):
			t.Errorf("%s: %q: the agent reached the host's loopback", a, line)
		}
	}

	// Inbound: nothing the agent listens on is reachable from the host.
	port := unusedPort4(t)
	exe, _ := os.Executable()
	sb := sandboxDir(t, data, "c_listen")
	cmd := exec.Command(exe)
	cmd.Dir = filepath.Join(sb, "work")
	cmd.Env = []string{listenVar + "=" + p(port)}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	release, err := l.Start(cmd, sb, agent.Confinement{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait(); release() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("the agent did not listen: %q %v", line, err)
	}
	// pasta's automatic forwarding (-t auto), were it on, would bind the
	// agent's port on the host within a second of a scan: watch for two.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, a := range []string{"127.0.0.1", n.HostAddr} {
			if line := dialLine(net.JoinHostPort(a, p(port))); !strings.HasPrefix(line, "error:") {
				t.Fatalf("the host reached the agent's port at %s: %q", a, line)
			}
		}
		time.Sleep(100 * time.Millisecond) // a window to watch, not a condition to wait for
	}
}

// unusedPort4 is a free TCP port of this namespace.
func unusedPort4(t *testing.T) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newPastaNet makes the namespaces and links of a pastaNet.
func newPastaNet(t *testing.T) pastaNet {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	n := pastaNet{Host: "sp-host-" + sfx, Remote: "sp-remote-" + sfx,
		HostAddr: "10.231.0.1", Gateway: "10.231.0.2", OtherAddr: "10.232.0.1"}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{n.Host, n.Remote} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ip("-n", ns, "link", "set", "lo", "up")
	}
	vh, vr := "sph"+sfx, "spr"+sfx
	ip("link", "add", vh, "netns", n.Host, "type", "veth", "peer", "name", vr, "netns", n.Remote)
	ip("-n", n.Host, "addr", "add", n.HostAddr+"/24", "dev", vh)
	ip("-n", n.Host, "link", "set", vh, "up")
	ip("-n", n.Remote, "addr", "add", n.Gateway+"/24", "dev", vr)
	ip("-n", n.Remote, "link", "set", vr, "up")
	ip("-n", n.Host, "route", "add", "default", "via", n.Gateway)
	// On lo: not every kernel has dummy interfaces, and an address there
	// is as much the host's own.
	ip("-n", n.Host, "addr", "add", n.OtherAddr+"/32", "dev", "lo")
	return n
}

// inNetns runs fn on a thread of its own in the named network namespace:
// what fn opens or starts is there. The thread ends with fn.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open("/run/netns/" + name)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		if err == nil {
			fn()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("enter %s: %v", name, err)
	}
}

// serveIn serves name to every connection on addr in namespace ns, and
// sets *port.
func serveIn(t *testing.T, ns, addr, name string, port *int) {
	t.Helper()
	var l net.Listener
	var err error
	inNetns(t, ns, func() { l, err = net.Listen("tcp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	*port = loopback.Serve(t, l, func(c *net.TCPConn) { fmt.Fprintln(c, name) }).Port
}

// runInNetns runs the test named again in the network namespace ns, as
// user, with env added to its environment.
func runInNetns(t *testing.T, ns, user, name string, env ...string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(hostile), "confine-netns.test") // world-readable: made by TestMain
	if err := nobody.CopyExe(exe, bin); err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("/var/tmp", "confine-netns-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Dir = work
	cmd.Env = append([]string{asUserVar + "=" + work, hostileVar + "=" + hostile,
		"PATH=" + os.Getenv("PATH"), "HOME=" + work, "TMPDIR=" + work}, env...)
	if user == "nobody" {
		os.Chown(work, 65534, 65534)
		asNobody(cmd)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	inNetns(t, ns, func() { err = cmd.Run() })
	if err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: "+name)) {
		t.Fatalf("in network namespace %s as %s: %v\n%s", ns, user, err, out.String())
	}
	t.Log(out.String())
}

// TestPastaFails: where pasta cannot give a namespace a network (here a
// host with no route out), the agent still starts, with its loopback and
// its host ports, and the log says why.
func TestPastaFails(t *testing.T) {
	if os.Getenv(pastaFailVar) != "" {
		var log bytes.Buffer
		given := loopback.Greeter(t, "given") // on the loopback of the namespace the test made
		data := filepath.Join(os.Getenv(asUserVar), "data")
		os.MkdirAll(data, 0o700)
		l := newLauncher(t, confine.Options{DataDir: data, Network: confine.NetworkOpen, HostPorts: []int{given},
			Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))})
		addr := "127.0.0.1:" + strconv.Itoa(given)
		if got := dialConfined(t, l, agent.Confinement{}, data, "c_nonet", addr); got[addr] != "given" {
			t.Errorf("the agent's host port without pasta's network: %q", got[addr])
		}
		if !strings.Contains(log.String(), "pasta could not give it one") {
			t.Errorf("the log does not say the agent has no network:\n%s", log.String())
		}
		return
	}
	requirePasta(t)
	if os.Getuid() != 0 {
		t.Skip("makes a network namespace: run as root (CI does)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	ns := "sp-noroute-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	exec.Command("ip", "-n", ns, "link", "set", "lo", "up").Run()
	runInNetns(t, ns, "root", "TestPastaFails", pastaFailVar+"=1")
}

// syncWriter serializes writes to w: the launcher logs from goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
