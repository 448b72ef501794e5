package confine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sparkles-dev/sparkles/internal/agent"
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
	cgOnce  sync.Once
	cg      *cgroups // nil: the memory guard and rlimits; set by cgroups
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
	// pasta is looked for on the PATH beside the checks below: on a cold
	// page cache each directory of the PATH is a read of the disk. (serve
	// prepares its launcher once it serves, so none of it delays the
	// server's first answer.)
	pasta := lookForPasta()
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
	p := <-pasta
	if err := l.chooseNetwork(explicit, p.path, p.why); err != nil {
		return nil, err
	}
	l.nproc = kernelAtLeast(5, 14)
	return l, nil
}

// cgroups finds and readies the cgroups that limit agents, once, for the
// first caller that needs them: the probe's start (which begins once the
// server serves), or what names the limits. Prepare leaves them out: on
// cgroup v1 the check makes and removes a cgroup in each hierarchy, a
// millisecond or two of a cold start on its way to the first answer.
func (l *Launcher) cgroups() (*cgroups, string) {
	l.cgOnce.Do(func() { l.cg, l.cgWhy = openCgroups() })
	return l.cg, l.cgWhy
}

// Probe starts the launcher once on a scratch sandbox and checks from
// inside what it does; it runs once, and every later call, Start's
// included, returns its verdict. No agent starts before it passed.
func (l *Launcher) Probe() error {
	l.probeOnce.Do(func() { l.probeErr = l.probeYielding() })
	return l.probeErr
}

// probeNice is the nice value the probe's processes run at.
const probeNice = 10

// probeYielding runs the probe so that its processes yield the CPU: the
// probe runs while the server begins to serve, and its two starts of this
// binary (tens of ms of CPU) would otherwise take the CPU from the
// server's first answers.
func (l *Launcher) probeYielding() error { return yielding(probeNice, l.probe) }

// Yielding runs fn as the probe runs, on a thread of its own at probeNice:
// for the server's confinement check (Prepare, then the probe), which runs
// while the server answers its first requests and must yield them the CPU.
func Yielding(fn func() error) error { return yielding(probeNice, fn) }

// yielding runs fn on a thread of its own whose nice value is raised to
// nice, which every process fn starts inherits. The thread is never
// unlocked: it ends with the goroutine, after fn returned (a process
// started with Pdeathsig is tied to the thread that started it, so fn
// must wait for its processes), and no other goroutine ever runs at its
// priority. Called on a thread at that nice value already (Yielding's fn
// probing the launcher, or a server started niced), it runs fn there,
// held to that thread until fn returns, instead of on another.
func yielding(nice int, fn func() error) error {
	runtime.LockOSThread()
	// getpriority answers 20 minus the thread's nice value.
	if prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid()); err == nil && 20-prio >= nice {
		defer runtime.UnlockOSThread()
		return fn()
	}
	runtime.UnlockOSThread()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// On Linux the nice value is a thread's: PRIO_PROCESS with a
		// thread id sets that thread's alone. A failure leaves it as it
		// was, which only costs the server's start some CPU.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
		done <- fn()
	}()
	return <-done
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
	if cg, _ := l.cgroups(); cg != nil {
		memory, procs = cg.mechanism(), cg.procsMechanism()
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
	if cg, why := l.cgroups(); cg == nil {
		attrs = append(attrs, "no_cgroup", why)
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
