package confine

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// cgroups is the server's own cgroup v2, delegated to it: each agent gets
// a child of it with pids.max and memory.max, and its launcher is cloned
// straight into it (CLONE_INTO_CGROUP), so no process of the agent ever
// runs outside its limits.
type cgroups struct {
	dir string
	seq atomic.Uint64
}

// cgroup is one agent's.
type cgroup struct {
	dir string
	fd  int
}

// openCgroups finds the server's cgroup and whether it may manage it; the
// reason is said when it may not.
func openCgroups() (*cgroups, string) {
	rel, err := ownCgroup()
	if err != nil {
		return nil, err.Error()
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err.Error()
	}
	return delegated(filepath.Join(mnt, rel), os.Geteuid(), os.Getpid())
}

// delegated checks that dir is a cgroup v2 handed to this process to
// manage and readies it: with pids and memory enabled for its children,
// the server itself moved to a leaf (a cgroup with processes cannot have
// controllers enabled for children). A cgroup counts as delegated when the
// delegate extended attribute is set on it (systemd's Delegate=) or, for a
// user other than root, when it belongs to that user (systemd's user
// manager hands the user its subtree).
func delegated(dir string, euid, pid int) (*cgroups, string) {
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("no cgroup v2 for this process (%v)", unwrap(err))
	}
	have := strings.Fields(string(ctrl))
	for _, c := range []string{"pids", "memory"} {
		if !slices.Contains(have, c) {
			return nil, fmt.Sprintf("the %s controller is not available in cgroup %s", c, dir)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, err.Error()
	}
	if !hasDelegateXattr(dir) && (euid == 0 || int(st.Uid) != euid) {
		return nil, fmt.Sprintf("cgroup %s is not delegated to this process (run it as a systemd unit with Delegate=yes)", dir)
	}
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return nil, err.Error()
	}
	if on := strings.Fields(string(sub)); !slices.Contains(on, "pids") || !slices.Contains(on, "memory") {
		leaf := filepath.Join(dir, "sparkles-server")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Sprintf("cannot make a leaf cgroup for the server: %v", unwrap(err))
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return nil, fmt.Sprintf("cannot move the server to its leaf cgroup: %v", unwrap(err))
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids +memory"), 0o644); err != nil {
			return nil, fmt.Sprintf("cannot enable pids and memory for agents in %s: %v", dir, unwrap(err))
		}
	}
	return &cgroups{dir: dir}, ""
}

func hasDelegateXattr(dir string) bool {
	buf := make([]byte, 8)
	for _, name := range []string{"trusted.delegate", "user.delegate"} {
		if n, err := unix.Getxattr(dir, name, buf); err == nil && strings.TrimSpace(string(buf[:n])) == "1" {
			return true
		}
	}
	return false
}

// create makes one agent's cgroup; nil without cgroups.
func (c *cgroups) create(name string, maxProcs int, memoryMax int64) (*cgroup, error) {
	if c == nil {
		return nil, nil
	}
	dir := filepath.Join(c.dir, fmt.Sprintf("agent-%s-%d", name, c.seq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	cg := &cgroup{dir: dir, fd: -1}
	for file, v := range map[string]string{"pids.max": strconv.Itoa(maxProcs), "memory.max": strconv.FormatInt(memoryMax, 10)} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
			cg.remove()
			return nil, fmt.Errorf("set %s: %w", file, err)
		}
	}
	// Without swap limited too, memory.max only moves the agent to swap.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		cg.remove()
		return nil, err
	}
	cg.fd = fd
	return cg, nil
}

// closeFD closes the descriptor once the launcher is in the cgroup.
func (cg *cgroup) closeFD() {
	if cg != nil && cg.fd >= 0 {
		unix.Close(cg.fd)
		cg.fd = -1
	}
}

// remove deletes the cgroup once the launcher is gone, and with it, as it
// was PID 1 of its namespace, every process of the agent.
func (cg *cgroup) remove() {
	if cg == nil {
		return
	}
	cg.closeFD()
	_ = unix.Rmdir(cg.dir)
}

// ownCgroup is this process's cgroup v2 path, from /proc/self/cgroup.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("no cgroup v2 for this process")
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup v2 mount")
}
