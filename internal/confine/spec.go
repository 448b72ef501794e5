package confine

import "time"

// The reserved first arguments that make the sparkles binary the launcher
// or the probe's check instead of the CLI. They cannot clash with a
// command: no command starts with "__".
const (
	launcherArg = "__sparkles-launcher"
	checkArg    = "__sparkles-launcher-check"
)

// Network settings of an agent.
const (
	NetworkOpen = "open" // the host's network: agents reach their model API
	NetworkNone = "none" // a network namespace of its own with only loopback
)

// IsEntry reports whether args (os.Args) ask the binary to be the launcher
// or the probe's check; main then calls Main before anything else.
func IsEntry(args []string) bool {
	return len(args) > 1 && (args[1] == launcherArg || args[1] == checkArg)
}

// spec is what the server tells the launcher: everything the agent is and
// may do. It travels as JSON on the launcher's fd 3, the lifeline pipe,
// rather than in an environment variable, so that neither its size (the
// agent's env holds the sandbox's secrets) nor its content leaks to the
// agent's environment.
type spec struct {
	Path string   // the agent's executable, absolute
	Args []string // its argv
	Env  []string // its whole environment
	Dir  string   // its working directory

	Sandbox string   // the sandbox directory, kept visible under the covers
	Own     []string // read-write: the working directory, the sandbox's home and tmp
	Read    []string // read-only files and directories: install dirs, interpreter, operator paths
	Write   []string // read-write operator paths
	Protect []string // the data dir and the server user's home: never shown, even inside a path above

	// Resolver, when set, is shown at ResolverAt (what /etc/resolv.conf
	// names) to an agent with network open: the host's resolver listens
	// on its own loopback, which the agent's namespace does not reach.
	Resolver, ResolverAt string

	Network  string
	NoFile   uint64 // RLIMIT_NOFILE
	MaxProcs uint64 // RLIMIT_NPROC; 0 leaves it as it is
	// MemoryMax is the agent's memory limit in bytes, what its /tmp and
	// /dev/shm hold counted in: they are sized no larger.
	MemoryMax int64
	// MemoryGuard is how often the launcher's memory guard polls, when
	// no cgroup bounds the agent's memory (memguard_linux.go); 0 when one does.
	MemoryGuard time.Duration
	ABI         int // the Landlock ABI the server probed; the launcher enforces exactly it

	// AgentID, when not 0, is the uid and gid the agent runs as in its user
	// namespace (the server is root: the launcher stays root of the
	// namespace to build the agent's view, the agent does not).
	AgentID int

	// HostPorts are the ports of the host's loopback the launcher
	// forwards into the agent's namespace (forward_linux.go).
	HostPorts []int
}

// AgentID is the uid and gid agents run as, in their user namespace and on
// the host alike, when the server is root. Root's agents would otherwise be
// uid 0 without capabilities: still the owner of every root-owned file
// (chmod on a host program), and exempt from RLIMIT_NPROC. It is a single
// id outside the ranges distributions hand to users (below 60000) and to
// containers' subordinate ids (Podman's from 2^31), so no account shares it.
// A server that is not root runs its agents as its own uid: it cannot map
// another without a setuid helper, and its files are out of the agent's
// reach by the read-only mounts.
const AgentID = 2000000000
