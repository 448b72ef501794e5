package confine

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
	Mask    []string // directories covered by an empty tmpfs, but for the paths above

	Network  string
	NoFile   uint64 // RLIMIT_NOFILE
	MaxProcs uint64 // RLIMIT_NPROC; 0 leaves it as it is
	ABI      int    // the Landlock ABI the server probed; the launcher enforces exactly it
}
