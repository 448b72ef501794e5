package confine

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every agent has a network namespace of its own, whatever its network:
// its loopback is not the host's. With network open, pasta (Debian's and
// Ubuntu's passt package, as Podman runs it for rootless containers) gives
// that namespace a route out: it joins the namespace, configures an
// interface there with the host's addresses and routes, and turns the
// agent's packets into sockets of its own on the host. What it is told
// (pastaArgs) keeps the host's loopback and the agent's ports apart.

// pastaTimeout bounds how long pasta may take to configure a namespace.
const pastaTimeout = 10 * time.Second

// pastaArgs are pasta's options for the namespaces of the process pid.
//
//   - --config-net: configure the namespace's interface, addresses and
//     routes from the host's, before reporting ready (--pid).
//   - -t none -u none: forward no port of the host into the namespace, so
//     what the agent listens on is never exposed on the host (pasta's
//     default, auto, would bind every port the agent listens on).
//   - -T none -U none: forward nothing of the namespace to the host's
//     loopback (the default, auto, would make every port bound on the
//     host's loopback reachable from the namespace's).
//   - --no-map-gw: the gateway address is the gateway, not an alias of the
//     host's loopback (by default pasta maps connections to it there).
//
// The host's own addresses need nothing: the namespace gets copies of them,
// so connecting to one stays inside it, and a host address it does not
// copy is reached as from the network, where a listener on the host's
// 127.0.0.1 is not. --foreground keeps pasta a child of the server, so it
// can be stopped with the agent and dies with the server (Pdeathsig).
func pastaArgs(pidFile string, pid int) []string {
	args := []string{
		"--foreground", "--quiet", "--config-net",
		"--tcp-ports", "none", "--udp-ports", "none",
		"--tcp-ns", "none", "--udp-ns", "none",
		"--no-map-gw",
		"--pid", pidFile,
	}
	if os.Geteuid() == 0 {
		// Only the owner of the launcher's user namespace, root, may
		// join it; left alone, pasta would switch to nobody first. It
		// holds capabilities in that namespace only, and sandboxes itself
		// (an empty root, its own seccomp filter).
		args = append(args, "--runas", "0:0")
	}
	return append(args, strconv.Itoa(pid))
}

// pastaFound is what findPasta found.
type pastaFound struct{ path, why string }

// lookForPasta begins findPasta on a goroutine of its own; its result
// comes on the channel.
func lookForPasta() chan pastaFound {
	found := make(chan pastaFound, 1)
	go func() { found <- findPasta() }()
	return found
}

// findPasta is pasta's path on the PATH, or why it cannot be used.
func findPasta() pastaFound {
	p, err := exec.LookPath("pasta")
	if err != nil {
		return pastaFound{why: "pasta is not installed (apt-get install passt)"}
	}
	// pasta makes the namespace's interface with the tun device, as the
	// server's user: distributions make it 0666, some machines 0600.
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return pastaFound{why: fmt.Sprintf("pasta cannot use /dev/net/tun (%v): it needs the device readable and writable by the server's user (mode 0666, as distributions make it)", unwrap(err))}
	}
	f.Close()
	return pastaFound{path: p}
}

// chooseNetwork settles the network of agents whose registry entry does
// not choose one. Open needs pasta: where it cannot run, an operator who
// asked for open gets an error naming it, and one who did not gets network
// none with a warning, so that a fresh machine still runs agents.
// pasta and why are what findPasta found.
func (l *Launcher) chooseNetwork(explicit bool, pasta, why string) error {
	l.pasta, l.pastaWhy = pasta, why
	if l.opts.Network != NetworkOpen || l.pasta != "" {
		return nil
	}
	if explicit {
		return &OptionError{"Network", "open: " + l.pastaWhy + "; pass --agent-network none to run agents without a network"}
	}
	l.opts.Network = NetworkNone
	l.netNote = "; network none: " + l.pastaWhy
	l.opts.Logger.Warn("agents get network none, not open (the default): " + l.pastaWhy + "; pass --agent-network none to choose it")
	return nil
}

// agentNet is what one agent's network needs of the server: the host-port
// socket pair and pasta.
type agentNet struct {
	ctl    *os.File // the launcher's end, until it has started
	stopHP func()
	pasta  *pastaProc
}

// newAgentNet makes the host-port socket pair when sp names host ports;
// files are what the launcher inherits after the spec pipe.
func (l *Launcher) newAgentNet(sp spec) (*agentNet, error) {
	n := &agentNet{}
	if len(sp.HostPorts) == 0 {
		return n, nil
	}
	ours, theirs, err := hostPortPair()
	if err != nil {
		return nil, err
	}
	n.ctl = theirs
	n.stopHP = serveHostPorts(ours, sp.HostPorts, l.opts.Logger)
	return n, nil
}

func (n *agentNet) files() []*os.File {
	if n.ctl == nil {
		return nil
	}
	return []*os.File{n.ctl}
}

// connectNet is told that the launcher runs as pid, waiting for its spec:
// the launcher's end of the socket pair is closed here, and pasta started
// for a namespace with network open. A pasta that fails leaves the agent
// with its loopback and host ports, and a warning: less network, never
// more.
func (l *Launcher) connectNet(n *agentNet, sp spec, pid int) {
	if n.ctl != nil {
		n.ctl.Close()
		n.ctl = nil
	}
	if sp.Network != NetworkOpen || l.pasta == "" {
		return
	}
	log := l.opts.Logger.With("sandbox", filepath.Base(sp.Sandbox))
	p, err := startPasta(l.pasta, pid, log)
	if err != nil {
		log.Warn("the agent has no network beyond its host ports: pasta could not give it one", "err", err)
		return
	}
	n.pasta = p
}

// stop ends what the agent's network held; safe to repeat.
func (n *agentNet) stop() {
	if n.ctl != nil {
		n.ctl.Close()
		n.ctl = nil
	}
	if n.stopHP != nil {
		n.stopHP()
		n.stopHP = nil
	}
	if n.pasta != nil {
		n.pasta.stop()
	}
}

// pastaProc is one pasta, a child of the server.
type pastaProc struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed once it has exited
	up       atomic.Bool   // it configured the namespace
	stopping atomic.Bool   // the server ends it
	stderr   *tailBuffer
	err      error
}

// startPasta starts pasta for the namespaces of pid and returns once it
// has configured them: pasta writes its pid file then, and the file is a
// FIFO the server reads. The launcher waits for its spec meanwhile, so the
// agent starts with its network in place.
func startPasta(path string, pid int, log *slog.Logger) (*pastaProc, error) {
	// A private directory in the server's temporary directory: there
	// pasta's AppArmor profile (Debian, Ubuntu) lets it write a pid file.
	dir, err := os.MkdirTemp("", "sparkles-pasta-")
	if err != nil {
		return nil, fmt.Errorf("pasta: %w", err)
	}
	defer os.RemoveAll(dir)
	fifo := filepath.Join(dir, "pid")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("pasta: %w", err)
	}
	// Read and write: with a writer of its own, the FIFO never reads as
	// ended before pasta has opened it.
	rd, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("pasta: %w", err)
	}
	defer rd.Close()

	p := &pastaProc{done: make(chan struct{}), stderr: &tailBuffer{max: 4 << 10}}
	p.cmd = exec.Command(path, pastaArgs(fifo, pid)...)
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{
		// Not in the server's process group: a Ctrl-C in the server's
		// terminal must not cut agents off while they are stopped.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if os.Geteuid() == 0 {
		// pasta stays uid 0 (pastaArgs): in a PID namespace of its own it
		// has no process of the host's to signal.
		p.cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pasta: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		if p.up.Load() && !p.stopping.Load() {
			log.Warn("pasta exited: the agent has lost its network", "err", p.message())
		}
		close(p.done)
	}()
	ready := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(rd).ReadString('\n')
		ready <- err
	}()
	timer := time.NewTimer(pastaTimeout)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-p.done:
		return nil, errors.New(p.message())
	case <-timer.C:
		err = fmt.Errorf("pasta did not configure the namespace within %v", pastaTimeout)
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	p.up.Store(true)
	return p, nil
}

// stop kills pasta and waits for it; safe to repeat. SIGKILL: as the
// init of its PID namespace, pasta would ignore a signal it has no handler
// for.
func (p *pastaProc) stop() {
	p.stopping.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// message is why pasta ended, from what it printed.
func (p *pastaProc) message() string {
	var lines []string
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		// Without a syslog daemon, pasta says so before every message.
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "Failed to send ") {
			lines = append(lines, line)
		}
	}
	msg := strings.Join(lines, "; ")
	if msg == "" {
		msg = fmt.Sprint(p.err)
	}
	return "pasta: " + msg
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
