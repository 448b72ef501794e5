package confine

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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// Defaults of Options.
const (
	DefaultMaxProcs  = 1024
	DefaultMemoryMax = 4 << 30
	defaultNoFile    = 8192
)

// Options say what agents may do beyond their sandbox.
type Options struct {
	// Network is NetworkOpen or NetworkNone. Empty is open where pasta
	// is installed and none, with a warning, where it is not; an explicit
	// NetworkOpen without pasta is an error.
	Network string
	// HostPorts are TCP ports of the host's loopback that every agent may
	// reach, at the same port of its own loopback; nothing else of the
	// host's loopback is reachable, whatever the network.
	HostPorts []int
	// ReadPaths and WritePaths are what the operator adds to what every
	// agent may read, and read and write: absolute, existing paths.
	ReadPaths, WritePaths []string
	// MaxProcs bounds an agent's processes and threads (pids.max of its
	// cgroup, and RLIMIT_NPROC where the kernel counts it per user
	// namespace); 0 means DefaultMaxProcs.
	MaxProcs int
	// MemoryMax bounds an agent's memory, its tmpfs mounts counted in: by
	// its cgroup where the server may make one, else by the launcher's
	// memory guard (memguard_linux.go); 0 means DefaultMemoryMax.
	MemoryMax int64
	// DataDir is the server's data dir: no path given to an agent may
	// contain it, and the probe makes its scratch sandbox there.
	DataDir string
	Logger  *slog.Logger
}

// Launcher starts agents confined. It implements agent.Launcher.
type Launcher struct {
	opts    Options
	abi     int
	home    string   // the server user's home, covered in the agent's view
	data    string   // the data dir, resolved: no path of a command line may lie in it
	self    string   // this binary, readable by the probe's check
	protect []string // what no given path may contain
	nproc   bool     // RLIMIT_NPROC counts per user namespace here
	agentID int      // the uid and gid agents run as; 0: the server's own
	cg      *cgroups // nil: the memory guard and rlimits
	cgWhy   string   // why there are no cgroup limits
	reasons sync.Map // *exec.Cmd → why its limits stopped it, from release to ExitReason

	// The agents' network (pasta_linux.go).
	pasta    string // pasta's path; "" when it cannot run
	pastaWhy string // why it cannot
	netNote  string // why agents have network none unasked, for /readyz

	probeOnce sync.Once
	probeErr  error
}

// New checks that this machine can confine agents, by starting the
// launcher once on a scratch sandbox and checking from inside what it
// does, and returns the Launcher. Its error says what is missing.
func New(opts Options) (*Launcher, error) {
	l, err := Prepare(opts)
	if err != nil {
		return nil, err
	}
	if err := l.Probe(); err != nil {
		return nil, err
	}
	return l, nil
}

// Prepare checks the options and what the kernel offers, without the
// probe: a server starts serving what its store holds while Probe runs,
// and Start waits for the probe's verdict.
func Prepare(opts Options) (*Launcher, error) {
	explicit := opts.Network != ""
	if !explicit {
		opts.Network = NetworkOpen
	}
	if opts.Network != NetworkOpen && opts.Network != NetworkNone {
		return nil, &OptionError{"Network", fmt.Sprintf("%q: want %s or %s", opts.Network, NetworkOpen, NetworkNone)}
	}
	if opts.MaxProcs <= 0 {
		opts.MaxProcs = DefaultMaxProcs
	}
	if opts.MemoryMax <= 0 {
		opts.MemoryMax = DefaultMemoryMax
	}
	if opts.MemoryMax < minMemoryMax {
		return nil, &OptionError{"MemoryMax", fmt.Sprintf("%s: an agent needs %s at least", sizeText(opts.MemoryMax), sizeText(minMemoryMax))}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Launcher{opts: opts, abi: landlockABI(), agentID: agentIDHere()}
	if err := requireLandlock(l.abi); err != nil {
		return nil, err
	}
	var err error
	if l.self, err = filepath.EvalSymlinks("/proc/self/exe"); err != nil {
		return nil, fmt.Errorf("find this binary: %w", err)
	}
	if home, err := os.UserHomeDir(); err == nil {
		l.home = filepath.Clean(home)
	}
	for _, p := range []string{opts.DataDir, l.home} {
		if p == "" {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		l.protect = append(l.protect, p)
	}
	if opts.DataDir != "" {
		l.data = l.protect[0]
	}
	if l.opts.ReadPaths, err = cleanPaths("ReadPaths", opts.ReadPaths, l.protect); err != nil {
		return nil, err
	}
	if l.opts.WritePaths, err = cleanPaths("WritePaths", opts.WritePaths, l.protect); err != nil {
		return nil, err
	}
	if err := agentsMayWrite("WritePaths", l.opts.WritePaths, l.agentID); err != nil {
		return nil, err
	}
	if l.opts.HostPorts, err = checkPorts("HostPorts", opts.HostPorts); err != nil {
		return nil, err
	}
	if err := l.chooseNetwork(explicit); err != nil {
		return nil, err
	}
	l.nproc = kernelAtLeast(5, 14)
	l.cg, l.cgWhy = openCgroups()
	return l, nil
}

// Probe starts the launcher once on a scratch sandbox and checks from
// inside what it does; it runs once, and every later call, Start's
// included, returns its verdict. No agent starts before it passed.
func (l *Launcher) Probe() error {
	l.probeOnce.Do(func() { l.probeErr = l.probe() })
	return l.probeErr
}

// requireLandlock refuses a kernel without Landlock: the namespaces alone
// would leave the agent every file the server user can open.
func requireLandlock(abi int) error {
	if abi < 1 {
		return errors.New("the kernel has no Landlock (it needs Linux 5.13 or later with landlock in its lsm= list)")
	}
	return nil
}

// Isolation names what confines agents, for /readyz and the start-up log.
func (l *Launcher) Isolation() string {
	mem, procs := l.limits()
	if mem == procs {
		return "landlock+namespaces" + l.netNote + "; limits: " + mem
	}
	return "landlock+namespaces" + l.netNote + "; limits: memory " + mem + ", processes " + procs
}

// limits names what bounds an agent's memory and its processes.
func (l *Launcher) limits() (memory, procs string) {
	memory = fmt.Sprintf("guard (polls every %s)", guardEvery)
	if l.cg != nil {
		memory, procs = l.cg.mechanism(), l.cg.procsMechanism()
	}
	switch {
	case procs != "":
	case l.nproc:
		procs = "RLIMIT_NPROC"
	default:
		procs = "unbounded (RLIMIT_NPROC counts per user across the machine before Linux 5.14)"
	}
	return memory, procs
}

// LogAttrs describe the confinement for the start-up log line.
func (l *Launcher) LogAttrs() []any {
	mem, procs := l.limits()
	attrs := []any{"landlock_abi", l.abi, "network", l.opts.Network, "memory_limit", mem, "procs_limit", procs}
	if l.cg == nil {
		attrs = append(attrs, "no_cgroup", l.cgWhy)
	}
	if len(l.opts.HostPorts) > 0 {
		attrs = append(attrs, "host_ports", l.opts.HostPorts)
	}
	if l.abi < 6 {
		attrs = append(attrs, "weaker", "this kernel's Landlock cannot scope signals or abstract unix sockets (ABI 6)")
	}
	return attrs
}

// Start starts cmd, an agent whose sandbox directory is sandbox, through
// the launcher. cmd keeps its stdio; its Path, Args, Env and Dir become the
// spec, and the process started is the launcher. release must be called
// once cmd has been waited for.
func (l *Launcher) Start(cmd *exec.Cmd, sandbox string, extra agent.Confinement) (release func(), err error) {
	if err := l.Probe(); err != nil {
		return nil, err
	}
	sp, err := l.spec(cmd, sandbox)
	if err != nil {
		return nil, err
	}
	// Here, not in spec: the probe's check names the canary it must not read.
	argv, read, err := argGrants(cmd.Args, l.data, l.protect)
	if err != nil {
		return nil, err
	}
	sp.Args, sp.Read = argv, append(sp.Read, read...)
	if err := l.add(&sp, extra); err != nil {
		return nil, err
	}
	return l.start(cmd, sp)
}

// Check says whether an agent's own settings can be applied: the same
// rules as the server-wide ones (absolute paths, none that holds the data
// dir or the home, a known network).
func (l *Launcher) Check(extra agent.Confinement) error {
	var sp spec
	return l.add(&sp, extra)
}

// add applies what one agent's settings add to its spec.
func (l *Launcher) add(sp *spec, extra agent.Confinement) error {
	switch extra.Network {
	case "":
	case NetworkOpen:
		if l.pasta == "" {
			return &OptionError{"Network", "open: " + l.pastaWhy}
		}
		sp.Network = extra.Network
	case NetworkNone:
		sp.Network = extra.Network
	default:
		return &OptionError{"Network", fmt.Sprintf("%q: want %s or %s", extra.Network, NetworkOpen, NetworkNone)}
	}
	read, err := cleanPaths("ReadPaths", extra.ReadPaths, l.protect)
	if err != nil {
		return err
	}
	write, err := cleanPaths("WritePaths", extra.WritePaths, l.protect)
	if err != nil {
		return err
	}
	if err := agentsMayWrite("WritePaths", write, l.agentID); err != nil {
		return err
	}
	ports, err := checkPorts("HostPorts", extra.HostPorts)
	if err != nil {
		return err
	}
	sp.Read = append(sp.Read, read...)
	sp.Write = append(slices.Clip(sp.Write), write...)
	// The server's host ports and the agent's own.
	sp.HostPorts, _ = checkPorts("HostPorts", slices.Concat(l.opts.HostPorts, sp.HostPorts, ports))
	return nil
}

func (l *Launcher) spec(cmd *exec.Cmd, sandbox string) (spec, error) {
	sandbox, err := filepath.Abs(sandbox)
	if err != nil {
		return spec{}, err
	}
	home, tmp := datadir.Sandbox(sandbox).Home(), datadir.Sandbox(sandbox).Tmp()
	for _, d := range []string{sandbox, home, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return spec{}, err
		}
	}
	path := cmd.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(cmd.Dir, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return spec{}, fmt.Errorf("resolve agent command: %w", err)
	}
	dir := cmd.Dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if real, err := filepath.EvalSymlinks(sandbox); err == nil {
		sandbox = real
	}
	home, tmp = datadir.Sandbox(sandbox).Home(), datadir.Sandbox(sandbox).Tmp()
	if l.agentID != 0 {
		for _, d := range []string{dir, home, tmp} {
			if err := ownTree(d, l.agentID); err != nil {
				return spec{}, fmt.Errorf("give the sandbox to the agent's uid: %w", err)
			}
		}
	}
	read := append(installPaths(real, l.protect), l.opts.ReadPaths...)
	// /etc/resolv.conf is often a link into /run (systemd-resolved): what
	// it points to is read for name resolution.
	if rc, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !inSystem(rc) {
		read = append(read, rc)
	}
	resolver, resolverAt := upstreamResolver("/etc/resolv.conf", systemdUpstream)
	return spec{
		Resolver:   resolver,
		ResolverAt: resolverAt,
		Path:       real,
		Args:       cmd.Args,
		Env:        privateEnv(cmd.Env, l.home, home, tmp),
		Dir:        dir,
		Sandbox:    sandbox,
		// Not the sandbox directory itself: agent.log is there, which the
		// server opens again at every boot.
		Own:      []string{dir, home, tmp},
		Read:     read,
		Write:    l.opts.WritePaths,
		Protect:  l.protect,
		Network:  l.opts.Network,
		NoFile:   defaultNoFile,
		MaxProcs: l.maxProcs(),
		ABI:      l.abi,
		AgentID:  l.agentID,
	}, nil
}

func (l *Launcher) maxProcs() uint64 {
	if !l.nproc {
		return 0 // counted per user across the machine: it would count the server's own
	}
	return uint64(l.opts.MaxProcs)
}

// privateEnv gives the agent its sandbox's home and temporary directory:
// the server's HOME (the one the base environment passed on) becomes the
// sandbox's, and TMPDIR is set unless the sandbox's env set one. A HOME the
// sandbox's env chose is kept, as its env wins over the base (docs/agents.md).
func privateEnv(env []string, serverHome, home, tmp string) []string {
	out := make([]string, 0, len(env)+2)
	hasHome, hasTmp := false, false
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME":
			hasHome = true
			if filepath.Clean(v) == serverHome || v == "" {
				kv = "HOME=" + home
			}
		case "TMPDIR":
			hasTmp = true
		}
		out = append(out, kv)
	}
	if !hasHome {
		out = append(out, "HOME="+home)
	}
	if !hasTmp {
		out = append(out, "TMPDIR="+tmp)
	}
	return out
}

// start starts the launcher for sp in place of cmd.
func (l *Launcher) start(cmd *exec.Cmd, sp spec) (func(), error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cg, err := l.cg.create(filepath.Base(sp.Sandbox), l.opts.MaxProcs, l.opts.MemoryMax)
	if err != nil {
		l.opts.Logger.Warn("no cgroup for this agent: its memory guard bounds it", "err", err)
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{"sparkles", launcherArg}
	cmd.Env = []string{}
	nw, err := l.newAgentNet(sp)
	if err != nil {
		w.Close()
		r.Close()
		cg.closeFD()
		cg.remove()
		return nil, err
	}
	cmd.ExtraFiles = append([]*os.File{r}, nw.files()...)
	cmd.SysProcAttr = l.sysProcAttr(cg)
	err = cmd.Start()
	r.Close()
	cg.closeFD()
	if err != nil {
		w.Close()
		nw.stop()
		cg.remove()
		return nil, fmt.Errorf("start the launcher: %w", err)
	}
	// Before the spec is written, as the cgroup below: the agent starts
	// with its network in place.
	l.connectNet(nw, sp, cmd.Process.Pid)
	// Before the spec is written: the launcher waits for it, so nothing of
	// the agent runs outside the cgroup.
	joinErr := cg.join(cmd.Process.Pid)
	if joinErr != nil {
		l.opts.Logger.Warn("the agent's cgroup could not take it: its memory guard bounds it", "err", joinErr)
	}
	sp.MemoryMax = l.opts.MemoryMax
	if cg == nil || joinErr != nil {
		sp.MemoryGuard = guardEvery
	}
	body, err := json.Marshal(sp)
	if err != nil {
		w.Close() // the launcher exits: it has no spec
		nw.stop()
		return nil, err
	}
	// The pipe buffer may be smaller than the spec: the launcher reads it
	// while this writes. The write end stays open as the lifeline.
	go func() { _, _ = w.Write(body) }()
	return func() {
		w.Close()
		nw.stop()
		l.explain(cmd, cg, sp)
		if err := cg.remove(); err != nil {
			l.opts.Logger.Warn("agent cgroup", "err", err)
		}
	}, nil
}

// explain keeps why the agent's limits stopped it, once cmd has been
// waited for, for ExitReason; with a cgroup, the launcher could not say it
// on the agent's stderr, so it is said there too.
func (l *Launcher) explain(cmd *exec.Cmd, cg *cgroup, sp spec) {
	limit := sizeText(sp.MemoryMax)
	var why string
	switch n := cg.oomKills(); {
	case sp.MemoryGuard > 0 && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == exitMemory:
		why = fmt.Sprintf("the agent used more than its memory limit of %s (--agent-memory-max) and was stopped", limit)
	case n > 0:
		why = fmt.Sprintf("the kernel killed %d of the agent's processes at its memory limit of %s (--agent-memory-max)", n, limit)
		if cmd.Stderr != nil {
			fmt.Fprintf(cmd.Stderr, "sparkles launcher: %s\n", why)
		}
	default:
		return
	}
	l.reasons.Store(cmd, why)
}

// ExitReason says why an agent started with cmd was stopped by its
// limits, once it has been waited for; "" when they did not stop it.
func (l *Launcher) ExitReason(cmd *exec.Cmd) string {
	why, _ := l.reasons.LoadAndDelete(cmd)
	s, _ := why.(string)
	return s
}

// sysProcAttr clones the launcher into namespaces of its own, as the
// server's own uid and gid, with the capabilities it needs to build the
// agent's view kept across its exec (ambient); they stay inside its user
// namespace and it drops them for the agent.
func (l *Launcher) sysProcAttr(cg *cgroup) *syscall.SysProcAttr {
	// A network namespace whatever the network: the host's loopback is
	// never the agent's (pasta gives an open one its route out).
	// An IPC namespace of its own too: SysV shared memory and message
	// queues are otherwise the host's, outlive the agent, and are memory
	// no limit of the agent's sees.
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC)
	uid, gid := os.Getuid(), os.Getgid()
	uids := []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	gids := []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	if l.agentID != 0 {
		// The launcher stays root of the namespace (it binds root's 0700
		// directories into the agent's view); the agent runs as AgentID.
		uids = append(uids, syscall.SysProcIDMap{ContainerID: l.agentID, HostID: l.agentID, Size: 1})
		gids = append(gids, syscall.SysProcIDMap{ContainerID: l.agentID, HostID: l.agentID, Size: 1})
	}
	a := &syscall.SysProcAttr{
		// A session of its own: the server's controlling terminal (a
		// developer's shell) is no /dev/tty of the agent's. Its process
		// group is its pid, as Setpgid would make it, for killGroup.
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  flags,
		UidMappings: uids,
		GidMappings: gids,
		// Root may let the launcher set the agent's groups (none); anyone
		// else must deny setgroups to map a gid at all.
		GidMappingsEnableSetgroups: l.agentID != 0,
		// NET_BIND_SERVICE: host ports below 1024 are the launcher's to
		// listen on in the namespace.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP},
	}
	if cg != nil && cg.fd >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, cg.fd
	}
	return a
}

// probe starts the launcher once, on a scratch sandbox in the data dir,
// with the check as its agent.
func (l *Launcher) probe() error {
	base := l.opts.DataDir
	if base == "" {
		base = os.TempDir()
	}
	scratch, err := os.MkdirTemp(base, ".confine-probe-")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer os.RemoveAll(scratch)
	canary := filepath.Join(scratch, "canary")
	if err := os.WriteFile(canary, []byte("not for agents"), 0o600); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	sandbox := filepath.Join(scratch, "sandbox")
	work := datadir.Sandbox(sandbox).Work()
	if err := os.MkdirAll(work, 0o700); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.self, checkArg, canary, filepath.Join(work, "probe"))
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	sp, err := l.spec(cmd, sandbox)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	sp.Read = append(sp.Read, l.self)
	// The probe proves the confinement, not the route out: pasta, which
	// takes most of a start's time, never makes an agent's network more
	// than it is (connectNet), so the probe runs without it.
	sp.Network = NetworkNone
	release, err := l.start(cmd, sp)
	if err != nil {
		return namespaceError(err)
	}
	err = cmd.Wait()
	release()
	var r report
	if json.Unmarshal(stdout.Bytes(), &r) == nil && len(r.Failed) > 0 {
		return fmt.Errorf("a confined process could still: %s", strings.Join(r.Failed, "; "))
	}
	if err != nil || !r.OK {
		msg := strings.TrimSpace(stderr.String())
		msg = strings.TrimPrefix(msg, "sparkles launcher: ")
		if msg == "" {
			msg = fmt.Sprint(err)
		}
		return fmt.Errorf("the launcher could not confine a process: %s%s", msg, apparmorHint())
	}
	return nil
}

// namespaceError says why the kernel refused the namespaces.
func namespaceError(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	var hint string
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		hint = " (unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone, or a security module)"
	case syscall.ENOSPC:
		hint = " (user.max_user_namespaces is 0 or reached)"
	case syscall.EINVAL:
		hint = " (the kernel lacks user, PID or mount namespaces)"
	}
	return fmt.Errorf("the kernel refused new namespaces: %v%s", errno, hint)
}

// apparmorHint names Ubuntu's restriction of user namespaces, which lets
// the clone succeed and the mounts fail.
func apparmorHint() string {
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return " (AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns=1; give this binary an AppArmor profile with userns, or set the sysctl to 0)"
	}
	return ""
}

// kernelAtLeast compares the running kernel's release with major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
