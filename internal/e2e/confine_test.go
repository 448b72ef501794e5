//go:build linux

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/loopback"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// probeResult is one line of the hostile agent's report.json.
type probeResult struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err"`
	Detail string `json:"detail"`
}

// buildHostileAgent builds internal/hostileagent, the agent that attacks
// its confinement.
func buildHostileAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hostileagent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sparkles-dev/sparkles/internal/hostileagent").CombinedOutput(); err != nil {
		t.Fatalf("build hostileagent: %v\n%s", err, out)
	}
	return bin
}

func randomMarker(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// marked lists the host's processes whose environment holds
// HOSTILE_MARKER=marker: everything a hostile agent started, wherever it
// moved in the process tree.
func marked(marker string) []int {
	want := []byte("HOSTILE_MARKER=" + marker + "\x00")
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoneMarked waits until no process carries marker; it fails the test
// when some still do at the deadline, and kills them.
func waitNoneMarked(t *testing.T, marker, after string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := marked(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes %v of the agent survived %s", left, after)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is no event to wait on
	}
}

// victim is a process of the test's for the agent to signal and trace.
func victim(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// loopbackListener accepts and closes connections on 127.0.0.1 until the
// test ends.
func loopbackListener(t *testing.T) string { return loopback.Listen(t, nil).String() }

// hostileTurn creates a sandbox of the hostile agent with env, runs one
// turn and returns the sandbox id and the agent's report.
func hostileTurn(t *testing.T, p *serveProc, dataDir string, env map[string]string) (string, map[string]probeResult) {
	t.Helper()
	return hostileTurnAs(t, p, dataDir, "hostile", env)
}

// hostileTurnAs is hostileTurn with the hostile agent registered as name.
func hostileTurnAs(t *testing.T, p *serveProc, dataDir, name string, env map[string]string) (string, map[string]probeResult) {
	t.Helper()
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{"agent": name, "env": env}, http.StatusCreated, &sb)
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "probe"}, http.StatusAccepted, nil)
	streamUntil(t, p, sb.ID, isFrame(sandbox.TypeTurnCompleted))
	b, err := os.ReadFile(filepath.Join(dataDir, "sandboxes", sb.ID, "work", "report.json"))
	if err != nil {
		t.Fatalf("no report from the hostile agent (%v); server log:\n%s", err, p.logTail())
	}
	var report map[string]probeResult
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatal(err)
	}
	return sb.ID, report
}

// uncoveredDir is a temporary directory outside /tmp, /run and the home,
// which the launcher covers with a tmpfs: there only Landlock stands
// between an agent and the files.
func uncoveredDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "sparkles-test-")
	if err != nil {
		t.Skipf("no /var/tmp to test Landlock alone in: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func joinTargets(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// TestConfinement runs a hostile agent under serve, confined (the default)
// and with --isolation=off. Unconfined, every probe succeeds: that is what
// makes the confined run's denials mean something. Confined, it cannot read
// the token, the database, another sandbox's files, the server user's home
// or other processes' environments, cannot see, signal or trace processes
// outside its sandbox, cannot write the host's /tmp, the data dir or the
// home, and cannot reach an abstract unix socket of the host; it can still
// write and read its work dir, HOME and TMPDIR, run /bin/sh and reach a
// loopback listener (network open). Everything it started dies when its
// sandbox is deleted and when the server is SIGKILLed, and its flood of
// stderr leaves agent.log capped.
func TestConfinement(t *testing.T) {
	hostile := buildHostileAgent(t)
	for _, mode := range []string{"on", "off"} {
		t.Run(mode, func(t *testing.T) {
			confined := mode == "on"
			// The home is under /tmp, which the launcher covers; the data dir
			// is where it covers nothing, so Landlock alone must deny it.
			dataDir, home := uncoveredDir(t), t.TempDir()
			if err := os.WriteFile(filepath.Join(home, "secret"), []byte("the user's"), 0o600); err != nil {
				t.Fatal(err)
			}
			hostTmp := filepath.Join(os.TempDir(), "sparkles-hostile-"+randomMarker(t))
			t.Cleanup(func() { os.Remove(hostTmp) })
			abstract := "sparkles-test-" + randomMarker(t)
			ul, err := net.Listen("unix", "@"+abstract)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ul.Close() })
			go func() {
				for {
					c, err := ul.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			addr := loopbackListener(t)
			hostPort := loopback.Greeter(t, "host-port")
			// A daemon's socket outside /tmp, /run and the home (think
			// /var/lib/mysql/mysql.sock): not mounted in the agent's view.
			sock := filepath.Join(uncoveredDir(t), "daemon.sock")
			if l, err := net.Listen("unix", sock); err != nil {
				t.Fatal(err)
			} else {
				t.Cleanup(func() { l.Close() })
			}
			os.Chmod(filepath.Dir(sock), 0o755)
			os.Chmod(sock, 0o777)
			killMe, traceMe := victim(t), victim(t)

			p := startServe(t, cliEnv(t, "HOME="+home), dataDir, "",
				"--agent", "hostile="+hostile, "--isolation", mode, "--agent-host-port", strconv.Itoa(hostPort))
			p.waitServing()
			token, err := os.ReadFile(filepath.Join(dataDir, "token")) // generated: a file to steal
			if err != nil {
				t.Fatal(err)
			}
			p.token = strings.TrimSpace(string(token))
			// Confined, it goes on to say what bounds memory and processes.
			wantIsolation := map[string]string{"on": "landlock+namespaces; limits: ", "off": "off"}[mode]
			var ready struct{ Status, Isolation string }
			p.mustCall(http.MethodGet, "/readyz", nil, http.StatusOK, &ready)
			if !strings.HasPrefix(ready.Isolation, wantIsolation) {
				t.Errorf("/readyz says isolation %q, want %q…", ready.Isolation, wantIsolation)
			}
			p.waitLog(`"isolation":"` + wantIsolation)
			if abi := logABI(t, p); confined && abi < 1 {
				t.Errorf("the start-up log says Landlock ABI %d for a confining server", abi)
			}

			// Sandbox A only lives: its files and its agent are what B goes for.
			markA, markB := randomMarker(t), randomMarker(t)
			t.Cleanup(func() {
				// Unconfined, the agents' lingerers outlive everything.
				for _, pid := range append(marked(markA), marked(markB)...) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			// A serves on its 127.0.0.1, which B must not reach.
			idA, rA := hostileTurn(t, p, dataDir, map[string]string{"HOSTILE_MARKER": markA, "HOSTILE_LISTEN": "a=0"})
			if !rA["listen:a"].OK {
				t.Fatalf("A could not serve on its loopback: %s", rA["listen:a"].Err)
			}
			servedA := "127.0.0.1:" + rA["listen:a"].Detail
			otherFile := filepath.Join(dataDir, "sandboxes", idA, "work", "secret.txt")
			if err := os.WriteFile(otherFile, []byte("A's"), 0o600); err != nil {
				t.Fatal(err)
			}
			agentsA := marked(markA)
			if len(agentsA) < 2 {
				t.Fatalf("want A's agent and its lingerer running, found %v", agentsA)
			}
			server := strconv.Itoa(p.cmd.Process.Pid)
			agentA := strconv.Itoa(agentsA[0])

			idB, r := hostileTurn(t, p, dataDir, map[string]string{
				"HOSTILE_MARKER": markB,
				"HOSTILE_READ": joinTargets(map[string]string{
					"token":          filepath.Join(dataDir, "token"),
					"db":             filepath.Join(dataDir, "sparkles.db"),
					"other-sandbox":  otherFile,
					"home":           filepath.Join(home, "secret"),
					"environ-agent":  "/proc/" + agentA + "/environ",
					"environ-server": "/proc/" + server + "/environ",
					"cmdline-server": "/proc/" + server + "/cmdline",
				}),
				"HOSTILE_WRITE": joinTargets(map[string]string{
					"agent-log": "../agent.log", // from its work dir: the server's file, next to it
					"host-tmp":  hostTmp,
					"data-dir":  filepath.Join(dataDir, "hostile"),
					"home":      filepath.Join(home, "hostile"),
				}),
				"HOSTILE_SEE":    joinTargets(map[string]string{"agent": agentA, "server": server}),
				"HOSTILE_KILL":   "victim=" + strconv.Itoa(killMe),
				"HOSTILE_PTRACE": "victim=" + strconv.Itoa(traceMe),
				"HOSTILE_DIAL":   joinTargets(map[string]string{"loopback": addr, "api": strings.TrimPrefix(p.url, "http://")}),
				"HOSTILE_FETCH": joinTargets(map[string]string{
					"sandbox-a": servedA,
					"host-port": "127.0.0.1:" + strconv.Itoa(hostPort),
				}),
				"HOSTILE_UNIX":   "abstract=" + abstract,
				"HOSTILE_STDERR": "flood=30",
				"HOSTILE_SYSCALL": "keyring,add_key,unshare-user,clone-newuser,clone3,mount,bpf,perf,userfaultfd," +
					"init_module,kexec,reboot,setns,tiocsti,x32,i386,io_uring",
				"HOSTILE_UNIXPATH": "var-tmp=" + sock,
				// Confined only: unconfined, root would make them so.
				"HOSTILE_CHMOD": map[bool]string{true: joinTargets(map[string]string{
					"agent-binary": hostile, // root's, and in the agent's view
					"data-dir":     dataDir,
					"token":        filepath.Join(dataDir, "token"),
				})}[confined],
			})
			for name, res := range r {
				kind, _, _ := strings.Cut(name, ":")
				switch kind {
				case "control":
					if !res.OK {
						t.Errorf("%s failed: %s", name, res.Err)
					}
				case "write":
					// Confined, a write under /tmp lands in the agent's own tmpfs:
					// whether it reached the host is checked on the host below.
					if !confined && !res.OK {
						t.Errorf("%s unconfined: %s", name, res.Err)
					}
				case "read", "see", "kill", "ptrace", "unix", "unixpath", "dial":
					if res.OK == confined {
						t.Errorf("%s: ok=%v %s, want ok=%v", name, res.OK, res.Err, !confined)
					}
				case "fetch":
					// The host port alone is the agent's in both modes.
					if want := name == "fetch:host-port" || !confined; res.OK != want {
						t.Errorf("%s: ok=%v %s %s, want ok=%v", name, res.OK, res.Detail, res.Err, want)
					}
				case "chmod", "chown", "utimes", "xattr":
					if res.OK {
						t.Errorf("%s: the agent changed a host file", name)
					}
				case "syscall":
					// Unconfined, some fail too (reboot's magic is wrong): only
					// the confined run says something of the filter.
					if confined && res.OK {
						t.Errorf("%s: ok (%s), want it denied by the seccomp filter", name, res.Detail)
					}
				}
			}
			if len(r) < 20 {
				t.Fatalf("the report has %d probes, want every one: %v", len(r), r)
			}
			if got := r["fetch:host-port"].Detail; got != "host-port" {
				t.Errorf("the agent read %q from its host port, want the host's service", got)
			}
			if c, err := net.DialTimeout("tcp4", servedA, 5*time.Second); (err == nil) == confined {
				t.Errorf("the host dialing what A serves on its loopback: %v, want reached=%v", err, !confined)
			} else if err == nil {
				c.Close()
			}
			if !confined {
				return // unconfined, the agent's processes outlive what follows: nothing to check
			}
			for _, leaked := range []string{hostTmp, filepath.Join(dataDir, "hostile"), filepath.Join(home, "hostile")} {
				if _, err := os.Stat(leaked); err == nil {
					t.Errorf("the agent wrote %s", leaked)
				}
			}
			for path, want := range map[string]os.FileMode{hostile: 0o755, dataDir: 0o700 | os.ModeDir, filepath.Join(dataDir, "token"): 0o600} {
				if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
					t.Errorf("%s after the agent's turn: %v (%v), want %v", path, fi.Mode(), err, want)
				}
			}
			if r["write:agent-log"].OK {
				t.Error("the agent wrote its agent.log, which the server opens again at every boot")
			}
			if err := syscall.Kill(killMe, 0); err != nil {
				t.Errorf("the victim is gone: %v", err)
			}
			if got, want := r["env:home"].Detail, filepath.Join(dataDir, "sandboxes", idB, "home"); got != want {
				t.Errorf("HOME = %q, want the sandbox's %q", got, want)
			}
			if pids := strings.Fields(r["list:proc"].Detail); slices.Contains(pids, agentA) || slices.Contains(pids, server) || len(pids) > 8 {
				t.Errorf("/proc shows %v: more than the sandbox's own", pids)
			}
			for _, f := range []string{"agent.log", "agent.log.1"} {
				fi, err := os.Stat(filepath.Join(dataDir, "sandboxes", idB, f))
				if err != nil || fi.Size() > 11<<20 {
					t.Errorf("%s after 30 MiB of stderr: %v, want at most 10 MiB and a bit", f, err)
				}
			}

			if got := marked(markB); len(got) < 2 {
				t.Fatalf("want B's agent and its lingerer running, found %v", got)
			}
			p.mustCall(http.MethodDelete, "/v1/sandboxes/"+idB, nil, http.StatusOK, nil)
			waitNoneMarked(t, markB, "the deletion of its sandbox")

			p.kill()
			waitNoneMarked(t, markA, "a SIGKILL of the server")
		})
	}
}

// TestConfinementNetworkNone: with --agent-network none the agent has a
// network of its own: the test's loopback listener is out of its reach,
// the host port named by --agent-host-port is not, and everything else it
// is allowed still works.
func TestConfinementNetworkNone(t *testing.T) {
	hostile := buildHostileAgent(t)
	dataDir := t.TempDir()
	addr, hostPort := loopbackListener(t), loopback.Greeter(t, "host-port")
	p := startServe(t, cliEnv(t), dataDir, "confine-token", "--agent", "hostile="+hostile, "--agent-network", "none",
		"--agent-host-port", strconv.Itoa(hostPort))
	p.waitServing()
	_, r := hostileTurn(t, p, dataDir, map[string]string{"HOSTILE_MARKER": randomMarker(t), "HOSTILE_DIAL": "loopback=" + addr,
		"HOSTILE_FETCH": "host-port=127.0.0.1:" + strconv.Itoa(hostPort)})
	if r["dial:loopback"].OK {
		t.Error("the agent reached the host's loopback with network none")
	}
	if got := r["fetch:host-port"]; got.Detail != "host-port" {
		t.Errorf("the agent's host port with network none: %q %s, want the host's service", got.Detail, got.Err)
	}
	for _, c := range []string{"control:work", "control:home", "control:tmpdir", "control:sh"} {
		if !r[c].OK {
			t.Errorf("%s failed: %s", c, r[c].Err)
		}
	}
}

// TestConfinementPerAgent: an agent's registry entry adds to the server's
// confinement: "network": "none" cuts that agent alone off the network,
// "write_paths" lets it write there and "host_ports" reach that port of
// the host's loopback, while another agent keeps the server's settings
// (and reaches nothing of the host's loopback). A path the rules refuse is
// one error at start.
func TestConfinementPerAgent(t *testing.T) {
	hostile := buildHostileAgent(t)
	dataDir, extra := uncoveredDir(t), uncoveredDir(t)
	addr, hostPort := loopbackListener(t), loopback.Greeter(t, "host-port")
	file := filepath.Join(t.TempDir(), "agents.json")
	writeAgents := func(writePath string) {
		b, _ := json.Marshal(map[string]any{"agents": map[string]any{
			"closed": map[string]any{"command": hostile, "network": "none", "write_paths": []string{writePath}, "host_ports": []int{hostPort}},
			"open":   map[string]any{"command": hostile},
		}})
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	giveToAgents(t, extra)
	writeAgents(extra)
	p := startServe(t, cliEnv(t), dataDir, "confine-token", "--agents-file", file)
	p.waitServing()
	target := func(name string) map[string]string {
		return map[string]string{
			"HOSTILE_MARKER": randomMarker(t),
			"HOSTILE_DIAL":   "loopback=" + addr,
			"HOSTILE_WRITE":  joinTargets(map[string]string{"extra": filepath.Join(extra, name)}),
			"HOSTILE_FETCH":  "host-port=127.0.0.1:" + strconv.Itoa(hostPort),
		}
	}
	_, closed := hostileTurnAs(t, p, dataDir, "closed", target("closed"))
	_, open := hostileTurnAs(t, p, dataDir, "open", target("open"))
	if closed["dial:loopback"].OK {
		t.Error(`the agent with "network": "none" reached the host's loopback`)
	}
	if open["dial:loopback"].OK {
		t.Error("the agent with the server's network reached the host's loopback")
	}
	if !closed["fetch:host-port"].OK || open["fetch:host-port"].OK {
		t.Errorf("host port: the agent given it %v (%s), the other %v; want only the first to reach it",
			closed["fetch:host-port"].OK, closed["fetch:host-port"].Err, open["fetch:host-port"].OK)
	}
	if _, err := os.Stat(filepath.Join(extra, "closed")); err != nil || !closed["write:extra"].OK {
		t.Errorf("the agent could not write its write_paths (%v, %s)", err, closed["write:extra"].Err)
	}
	if _, err := os.Stat(filepath.Join(extra, "open")); err == nil || open["write:extra"].OK {
		t.Error("an agent wrote another agent's write_paths")
	}
	p.signal(syscall.SIGTERM)

	writeAgents("relative/dir")
	bad := startServe(t, cliEnv(t), t.TempDir(), "confine-token", "--agents-file", file)
	if code := bad.wait(); code == 0 || !strings.Contains(bad.logTail(), `agent \"closed\": write_paths`) && !strings.Contains(bad.logTail(), `agent "closed": write_paths`) {
		t.Errorf("serve exited %d with a relative write_paths; want one error naming it:\n%s", code, bad.logTail())
	}
}

// TestServeFailsClosed: where the kernel refuses the namespaces, serve
// refuses to start, naming the flag that runs agents unconfined; with that
// flag it starts and runs the demo agent as before. The refusal is real: the
// server runs in a user namespace whose user.max_user_namespaces is 0.
func TestServeFailsClosed(t *testing.T) {
	if _, err := os.Stat("/proc/sys/user/max_user_namespaces"); err != nil {
		t.Skip("no user namespace limits here")
	}
	refused := func(args ...string) *exec.Cmd {
		sh := `echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`
		cmd := exec.Command("/bin/sh", append([]string{"-c", sh, "sh", binary, "serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
		cmd.Env = cliEnv(t)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		return cmd
	}
	out, err := refused("--data-dir", t.TempDir()).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "--isolation=off") || !strings.Contains(lines[0], "namespaces") {
		t.Fatalf("serve = %v with:\n%s\nwant one line that names --isolation=off", err, out)
	}

	cmd := refused("--data-dir", t.TempDir(), "--isolation=off")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{t: t, cmd: cmd, token: "", hc: &http.Client{Timeout: 10 * time.Second}, streams: &http.Client{},
		serving: make(chan struct{}), exited: make(chan struct{}), lines: make(chan string, 1024)}
	go p.readLog(stderr) // reaps the process too
	t.Cleanup(p.kill)
	p.waitServing()
	p.waitLog(`"isolation":"off"`)
}

// logABI is the Landlock ABI a confining server found, from its start-up
// log; 0 when it runs agents unconfined.
func logABI(t *testing.T, p *serveProc) int {
	t.Helper()
	for _, line := range strings.Split(p.logTail(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
			ABI int    `json:"landlock_abi"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "agents are confined" {
			return rec.ABI
		}
	}
	return 0
}

// TestServeConfineFlags: a confinement flag that cannot be used ends serve
// with one line that names the flag, not as a machine that cannot confine.
func TestServeConfineFlags(t *testing.T) {
	common := []string{"--addr", "127.0.0.1:0"}
	serveFails(t, "--isolation \"maybe\": want on or off", append(common, "--data-dir", t.TempDir(), "--isolation", "maybe")...)
	serveFails(t, "--agent-network \"some\": want open or none", append(common, "--data-dir", t.TempDir(), "--agent-network", "some")...)
	serveFails(t, "--agent-network none needs isolation", append(common, "--data-dir", t.TempDir(), "--agent-network", "none", "--isolation", "off")...)
	serveFails(t, "--agent-read-path \"relative\": want an absolute path", append(common, "--data-dir", t.TempDir(), "--agent-read-path", "relative")...)
	data := t.TempDir()
	serveFails(t, "which agents must not reach", append(common, "--data-dir", data, "--agent-write-path", filepath.Dir(data))...)
	serveFails(t, "--agent-host-port 70000: want a TCP port from 1 to 65535", append(common, "--data-dir", t.TempDir(), "--agent-host-port", "70000")...)
}

// TestServeWithoutPasta: where pasta is not installed, serve runs agents
// with network none, and says so in its log and /readyz, so that a fresh
// machine still runs them; an operator who asked for open gets a refusal
// that names pasta.
func TestServeWithoutPasta(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // serve's environment: no pasta on it
	serveFails(t, "--agent-network open: pasta is not installed (apt-get install passt)",
		"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--agent-network", "open")

	dataDir := t.TempDir()
	p := startServe(t, cliEnv(t), dataDir, "confine-token")
	p.waitServing()
	p.waitLog("agents get network none")
	var ready struct{ Isolation string }
	p.mustCall(http.MethodGet, "/readyz", nil, http.StatusOK, &ready)
	if !strings.Contains(ready.Isolation, "network none: pasta is not installed") {
		t.Errorf("/readyz says isolation %q, want it to say agents have network none for want of pasta", ready.Isolation)
	}
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	p.mustCall(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, nil)
	streamUntil(t, p, sb.ID, isFrame(sandbox.TypeTurnCompleted))
}
