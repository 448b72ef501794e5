//go:build linux

package confine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/nobody"
	"golang.org/x/sys/unix"
)

// demoVar makes the test binary the demo agent, for the boot benchmark;
// keyringVar makes it print what its session keyring is.
const (
	demoVar    = "SPARKLES_CONFINE_TEST_DEMO"
	keyringVar = "SPARKLES_CONFINE_TEST_KEYRING"
	ttyVar     = "SPARKLES_CONFINE_TEST_TTY"
)

// hostile is the hostile agent, built once by TestMain.
var hostile string

func TestMain(m *testing.M) {
	if confine.IsEntry(os.Args) {
		confine.Main() // the test binary is its own launcher, as sparkles is
	}
	if os.Getenv(keyringVar) != "" {
		id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
		desc, _ := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
		fmt.Println(desc, err)
		os.Exit(0)
	}
	if os.Getenv(demoVar) != "" {
		if err := agent.RunDemo(context.Background(), os.Stdin, os.Stdout, os.Environ()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(asUserVar) != "" || os.Getenv(seccompVar) != "" {
		hostile = os.Getenv(hostileVar) // built by the run that started this one
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "confine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // the unprivileged test runs from here too
	hostile = filepath.Join(dir, "hostileagent")
	if out, err := exec.Command("go", "build", "-o", hostile, "github.com/sparkles-dev/sparkles/internal/hostileagent").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build hostileagent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const waitLimit = 20 * time.Second

// varTmp is a directory where the launcher covers nothing: /tmp and the
// home are covered by tmpfs mounts, so there Landlock alone denies.
func varTmp(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "confine-test-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newLauncher(t testing.TB, opts confine.Options) *confine.Launcher {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = varTmp(t)
	}
	l, err := confine.New(opts)
	if err != nil {
		t.Fatalf("confine.New: %v", err)
	}
	return l
}

// TestProbeLeftovers: the probe of a start removes the scratch directory
// that a probe stopped halfway left in the data dir (a server stopped or
// killed while its probe ran), and leaves none of its own.
func TestProbeLeftovers(t *testing.T) {
	dataDir := varTmp(t)
	left := filepath.Join(dataDir, ".confine-probe-123")
	if err := os.MkdirAll(filepath.Join(left, "sandbox", "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "canary"), []byte("not for agents"), 0o600); err != nil {
		t.Fatal(err)
	}
	newLauncher(t, confine.Options{DataDir: dataDir})
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".confine-probe-") {
			t.Errorf("%s is still in the data dir after the probe", e.Name())
		}
	}
}

// sandboxDir makes <base>/sandboxes/<name>/work and returns the sandbox.
func sandboxDir(t testing.TB, base, name string) string {
	t.Helper()
	sb := filepath.Join(base, "sandboxes", name)
	if err := os.MkdirAll(filepath.Join(sb, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	return sb
}

// runConfined runs argv confined in sandbox and returns its output.
func runConfined(t *testing.T, l *confine.Launcher, sandbox string, env []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(sandbox, "work")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	release, err := l.Start(cmd, sandbox, agent.Confinement{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	err = cmd.Wait()
	release()
	return out.String(), err
}

// marked lists the processes whose environment holds marker.
func marked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, []byte(marker+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitMarked waits until cond holds of the marked processes.
func waitMarked(t *testing.T, marker string, what string, cond func(n int) bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond(len(marked(marker))) {
		if time.Now().After(deadline) {
			pids := marked(marker)
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("%s: processes %v", what, pids)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc: there is no event to wait on
	}
}

// TestLifeline: the agent and everything it started die once the server
// lets go of the launcher's pipe, with no signal sent to anyone. That is
// what makes them die with a server that is SIGKILLed: its end of the pipe
// closes with it, whichever of its threads started the launcher.
func TestLifeline(t *testing.T) {
	l := newLauncher(t, confine.Options{})
	sb := sandboxDir(t, varTmp(t), "lifeline")
	marker := "LIFELINE_MARKER=" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("/bin/sh", "-c", "sleep 600 & sleep 600")
	cmd.Dir = filepath.Join(sb, "work")
	cmd.Env = []string{marker, "PATH=/usr/bin:/bin"}
	release, err := l.Start(cmd, sb, agent.Confinement{})
	if err != nil {
		t.Fatal(err)
	}
	waitMarked(t, marker, "the agent's processes did not start", func(n int) bool { return n >= 3 })
	release() // the server lets go: nothing else happens
	waitMarked(t, marker, "the agent's processes outlived the lifeline", func(n int) bool { return n == 0 })
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("launcher exit: %v, want status 137", err)
	}
}

// TestPrivileges: the agent runs with no_new_privs, without any
// capability (even as root of its user namespace, even when the server is
// root), without core dumps and with a bounded number of open files.
func TestPrivileges(t *testing.T) {
	l := newLauncher(t, confine.Options{})
	sb := sandboxDir(t, varTmp(t), "privileges")
	out, err := runConfined(t, l, sb, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c",
		"echo core=$(ulimit -c) nofile=$(ulimit -n); grep -E '^(NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"core=0 nofile=8192", "NoNewPrivs:\t1", "CapInh:\t0000000000000000", "CapPrm:\t0000000000000000",
		"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}

// TestSandboxPaths: confined, a process reads the system and writes its
// sandbox (work, HOME, TMPDIR) and what the operator adds, and nothing
// else: not a file beside the sandbox, not the host's /tmp.
func TestSandboxPaths(t *testing.T) {
	base := varTmp(t)
	extraR, extraW := filepath.Join(base, "extra-read"), filepath.Join(base, "extra-write")
	for _, d := range []string{extraR, extraW} {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
	}
	if os.Getuid() == 0 {
		// Root's agents run as AgentID: the operator gives it its write paths.
		os.Chown(extraW, confine.AgentID, confine.AgentID)
		os.Chown(filepath.Join(extraW, "f"), confine.AgentID, confine.AgentID)
	}
	os.WriteFile(filepath.Join(base, "beside"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(base, "data"), 0o700)
	os.WriteFile(filepath.Join(base, "data", "token"), []byte("x"), 0o600)
	prog := filepath.Join(extraR, "prog")
	os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755)
	hostTmp, err := os.MkdirTemp("", "confine-host-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostTmp)
	os.WriteFile(filepath.Join(hostTmp, "f"), []byte("x"), 0o644)
	l := newLauncher(t, confine.Options{ReadPaths: []string{extraR}, WritePaths: []string{extraW}, DataDir: filepath.Join(base, "data")})
	sb := sandboxDir(t, base, "paths")
	script := `
try() { if eval "$2" >/dev/null 2>&1; then echo "$1=yes"; else echo "$1=no"; fi; }
try system 'cat /etc/passwd'
try work 'echo x > w && cat w'
try home 'echo x > "$HOME/h" && cat "$HOME/h"'
try tmpdir 'echo x > "$TMPDIR/t" && cat "$TMPDIR/t"'
try extra-read 'cat ` + extraR + `/f'
try extra-read-write 'echo y > ` + extraR + `/f'
try extra-write 'echo y > ` + extraW + `/f'
try beside 'cat ` + base + `/beside'
try beside-write 'echo y > ` + base + `/new'
try host-tmp 'cat ` + hostTmp + `/f'
try host-tmp-write 'echo y > ` + hostTmp + `/g'
try data-dir 'ls ` + filepath.Join(base, "data") + `'
try chmod-host 'chmod 4755 ` + prog + `'
try chmod-system 'chmod 0777 /etc/passwd'
try touch-root 'touch /sparkles-x'
try touch-usr 'touch /usr/sparkles-x'
try kernel-keys 'test -s /proc/keys || grep -q . /proc/keys || grep -q . /proc/key-users'
echo uid=$(id -u)
`
	out, err := runConfined(t, l, sb, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"system=yes", "work=yes", "home=yes", "tmpdir=yes", "extra-read=yes", "extra-read-write=no",
		"extra-write=yes", "beside=no", "beside-write=no", "host-tmp=no", "host-tmp-write=no", "data-dir=no",
		"chmod-host=no", "chmod-system=no", "touch-root=no", "touch-usr=no", "kernel-keys=no"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("want %s in:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(hostTmp, "g")); err == nil {
		t.Error("the confined process wrote the host's /tmp")
	}
	if fi, err := os.Stat(prog); err != nil || fi.Mode() != 0o755 {
		t.Errorf("a host program's mode after the agent ran: %v %v, want 0755", fi.Mode(), err)
	}
	want := "uid=" + strconv.Itoa(os.Getuid())
	if os.Getuid() == 0 {
		want = "uid=" + strconv.Itoa(confine.AgentID)
	}
	if !strings.Contains(out, want+"\n") {
		t.Errorf("want %s in:\n%s", want, out)
	}
}

// TestAgentConfined: the hostile agent run by agent.Start through the
// launcher, as the coordinator runs it: ACP works, its probes outside the
// sandbox fail, and the controls succeed.
func TestAgentConfined(t *testing.T) {
	report := hostileRun(t, confine.Options{}, map[string]string{})
	for _, c := range []string{"control:work", "control:home", "control:tmpdir", "control:tmp", "control:sh"} {
		if !report[c].OK {
			t.Errorf("%s failed: %s", c, report[c].Err)
		}
	}
}

type probeResult struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err"`
	Detail string `json:"detail"`
}

// hostileRun boots the hostile agent confined, runs one turn and returns
// its report.
func hostileRun(t *testing.T, opts confine.Options, env map[string]string) map[string]probeResult {
	t.Helper()
	l := newLauncher(t, opts)
	sb := sandboxDir(t, varTmp(t), "hostile")
	cfg := agent.Config{
		Command:  []string{hostile},
		Dir:      filepath.Join(sb, "work"),
		Env:      []string{"PATH=/usr/bin:/bin", "HOSTILE_MARKER=" + strconv.Itoa(os.Getpid())},
		Logger:   slog.New(slog.DiscardHandler),
		Launcher: l,
		Sandbox:  sb,
	}
	for k, v := range env {
		cfg.Env = append(cfg.Env, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := agent.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Close()
	if err := c.Prompt("turn_1", "probe"); err != nil {
		t.Fatal(err)
	}
	for in := range c.Inbox() {
		if in.Kind == agent.PromptDone {
			break
		}
		if in.Kind == agent.Exited {
			t.Fatalf("agent exited: %v", in.Err)
		}
	}
	b, err := os.ReadFile(filepath.Join(sb, "work", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]probeResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// asUserVar tells the test binary, rerun as an unprivileged user, that it
// is that run, and where it may write; hostileVar where the hostile agent is.
const (
	asUserVar  = "SPARKLES_CONFINE_TEST_AS_USER"
	hostileVar = "SPARKLES_CONFINE_TEST_HOSTILE"
)

// TestUnprivileged: everything holds for a server that is not root, as
// on a developer's laptop. Run as root, it reruns this test binary as
// nobody; run as anyone else, it is that user's run already.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() == 0 && os.Getenv(asUserVar) == "" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(hostile) // world-readable: made by TestMain
		bin := filepath.Join(dir, "confine.test")
		if err := nobody.CopyExe(exe, bin); err != nil {
			t.Fatal(err)
		}
		work, err := os.MkdirTemp("/var/tmp", "confine-nobody-")
		if err != nil {
			t.Skipf("no /var/tmp: %v", err)
		}
		defer os.RemoveAll(work)
		os.Chown(work, 65534, 65534)
		cmd := exec.Command(bin, "-test.run=^TestUnprivileged$", "-test.count=1", "-test.v")
		cmd.Dir = work
		cmd.Env = []string{asUserVar + "=" + work, hostileVar + "=" + hostile, "PATH=/usr/bin:/bin", "HOME=" + work, "TMPDIR=" + work}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestUnprivileged")) {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		return
	}
	base := os.Getenv(asUserVar)
	if base == "" {
		base = varTmp(t)
	}
	data := filepath.Join(base, "data")
	os.MkdirAll(data, 0o700)
	os.WriteFile(filepath.Join(data, "token"), []byte("secret"), 0o600)
	// With 40 processes and threads at most, the agent cannot start 100
	// sleepers: the kernel counts its RLIMIT_NPROC in its user namespace.
	// A program of this user's that agents may run: the agent is the same
	// uid, so only the read-only mount stops it making it setuid.
	tools := filepath.Join(base, "tools")
	os.MkdirAll(tools, 0o755)
	prog := filepath.Join(tools, "prog")
	os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755)
	opts := confine.Options{DataDir: data, MaxProcs: 40, ReadPaths: []string{tools}}
	l := newLauncher(t, opts)
	sb := sandboxDir(t, data, "c_nobody")
	out, err := runConfined(t, l, sb, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c",
		"id -u; if cat "+filepath.Join(data, "token")+" 2>/dev/null; then echo read-token; fi; "+
			"chmod 4755 "+prog+" 2>/dev/null && echo chmod-prog; chmod 0755 "+data+" 2>/dev/null && echo chmod-data; "+
			"echo ok > w && cat w")
	if err != nil || strings.Contains(out, "read-token") || strings.Contains(out, "chmod-") || !strings.Contains(out, "ok") {
		t.Fatalf("confined as %d: %v\n%s", os.Getuid(), err, out)
	}
	for path, want := range map[string]os.FileMode{prog: 0o755, data: 0o700 | os.ModeDir} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s after the agent ran: %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	if got := strings.Fields(out)[0]; got != strconv.Itoa(os.Getuid()) {
		t.Errorf("the agent's uid is %s, want the server's own %d", got, os.Getuid())
	}
	// The server user's keyring is this user's: an agent of the same uid
	// could link it without the seccomp filter.
	ring, secret := serverKey(t)
	r := hostileRun(t, opts, map[string]string{"HOSTILE_FORK": "sleepers=100", "HOSTILE_SYSCALL": syscallProbes(ring)})
	if n, _ := strconv.Atoi(r["fork:sleepers"].Detail); r["fork:sleepers"].OK || n >= 40 {
		t.Errorf("the agent started %d of 100 processes with a limit of 40: %+v", n, r["fork:sleepers"])
	}
	checkSyscallProbes(t, r, secret)
	// No cgroup for this user: the launcher's memory guard bounds memory.
	t.Run("Memory", testMemoryLimit)
}

// TestSessionKeyring: the agent does not get the server's session keyring
// (where Kerberos tickets and ecryptfs keys live), but an empty one, which
// the seccomp filter then keeps it from using at all.
func TestSessionKeyring(t *testing.T) {
	l := newLauncher(t, confine.Options{})
	sb := sandboxDir(t, varTmp(t), "keyring")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		// A session keyring is a thread's: the launcher is forked from this
		// one, which is never unlocked and so ends with the goroutine.
		runtime.LockOSThread()
		if _, err := unix.KeyctlJoinSessionKeyring("sparkles-server-keyring"); err != nil {
			out <- "join: " + err.Error()
			return
		}
		o, err := runConfined(t, l, sb, []string{keyringVar + "=1"}, exe)
		out <- fmt.Sprint(o, err)
	}()
	got := <-out
	if !strings.Contains(got, "operation not permitted") || strings.Contains(got, "sparkles-server-keyring") {
		t.Fatalf("the agent's session keyring: %q, want keyctl denied", got)
	}
}

// TestNoControllingTerminal: a server started from a terminal does not give
// the agent that terminal as /dev/tty (to read the developer's keys from,
// or write to). The test reruns itself in a session whose controlling
// terminal is a pty of its own, checks that /dev/tty opens there, and then
// that it does not for a confined process.
func TestNoControllingTerminal(t *testing.T) {
	openTTY := []string{"/bin/sh", "-c", "if ( : 3<>/dev/tty ) 2>/dev/null; then echo tty-open; else echo no-tty; fi"}
	if os.Getenv(ttyVar) == "" {
		ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer ptmx.Close()
		if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer pts.Close()
		exe, _ := os.Executable()
		cmd := exec.Command(exe, "-test.run=^TestNoControllingTerminal$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), ttyVar+"=1")
		var out bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Run(); err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: TestNoControllingTerminal")) {
			t.Fatalf("on a terminal: %v\n%s", err, out.String())
		}
		return
	}
	if out, _ := exec.Command(openTTY[0], openTTY[1:]...).Output(); !strings.Contains(string(out), "tty-open") {
		t.Fatalf("unconfined, /dev/tty does not open (%q): the test proves nothing", out)
	}
	l := newLauncher(t, confine.Options{})
	out, err := runConfined(t, l, sandboxDir(t, varTmp(t), "tty"), []string{"PATH=/usr/bin:/bin"}, openTTY...)
	if err != nil || !strings.Contains(out, "no-tty") {
		t.Fatalf("confined: %v: %q, want no /dev/tty", err, out)
	}
}
