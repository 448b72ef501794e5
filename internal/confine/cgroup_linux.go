package confine

import (
	"bufio"
	"bytes"
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

// cgroups is where each agent gets a cgroup of its own that bounds its
// memory (its tmpfs pages included: the kernel charges them to the cgroup
// that writes them) and its processes:
//
//   - cgroup v2, when the server's own is delegated to it: a child with
//     memory.max, memory.swap.max 0 and pids.max; the launcher is cloned
//     straight into it (CLONE_INTO_CGROUP);
//   - else cgroup v1, where the server may write it (root): a child of its
//     own memory cgroup (memory.limit_in_bytes, and memory.memsw.limit_in_bytes
//     where swap is accounted) and of its own pids cgroup (pids.max). v1 has
//     no CLONE_INTO_CGROUP: the server writes the launcher's pid into them
//     after starting it and before sending its spec, and the launcher reads
//     its spec before it does anything else, so nothing of the agent ever
//     runs outside them.
//
// Where neither can be made, the launcher's memory guard bounds memory
// (memguard_linux.go) and RLIMIT_NPROC bounds processes.
type cgroups struct {
	v2        string // the server's delegated cgroup v2; "" for v1
	mem, pids string // v1: the server's memory and pids cgroups; pids may be ""
	seq       atomic.Uint64
}

// cgroup is one agent's.
type cgroup struct {
	dirs []string // one per hierarchy, memory's first
	v1   bool
	fd   int // v2: the directory, for CLONE_INTO_CGROUP; -1 once closed
}

// hooks are set by tests only (export_test.go).
var hooks struct {
	noCgroups bool // as on a machine without a cgroup the server may manage
}

// mechanism names what bounds memory and processes through c.
func (c *cgroups) mechanism() string {
	if c.v2 != "" {
		return "cgroup2"
	}
	return "cgroup1"
}

// procsMechanism names what bounds processes through c.
func (c *cgroups) procsMechanism() string {
	if c.v2 == "" && c.pids == "" {
		return ""
	}
	return c.mechanism()
}

// openCgroups finds a cgroup the server may make agents' cgroups in:
// its own v2 if delegated, else its own v1 memory and pids cgroups if it
// may write them. Without one it says why.
func openCgroups() (*cgroups, string) {
	if hooks.noCgroups {
		return nil, "cgroups are turned off for this test"
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err.Error()
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err.Error()
	}
	own, mounts := parseProcCgroup(self), parseCgroupMounts(info)
	var whys []string
	if rel, ok := own[""]; ok {
		if dir, ok := cgroupDir(mounts, "", rel); ok {
			c, why := delegated(dir, os.Geteuid(), os.Getpid())
			if c != nil {
				c.cleanStale()
				return c, ""
			}
			whys = append(whys, why)
		} else {
			whys = append(whys, "no cgroup v2 mount holds this process's cgroup")
		}
	} else {
		whys = append(whys, "no cgroup v2 for this process")
	}
	c, why := writableV1(own, mounts, os.Getpid())
	if c != nil {
		c.cleanStale()
		return c, ""
	}
	return nil, strings.Join(append(whys, why), "; ")
}

// writableV1 finds the server's own memory and pids cgroups v1 and checks
// that it may make children there by making one. Without pids, the memory
// cgroup is enough: RLIMIT_NPROC bounds processes then.
func writableV1(own map[string]string, mounts []cgroupMount, pid int) (*cgroups, string) {
	rel, ok := own["memory"]
	if !ok {
		return nil, "no cgroup v1 memory controller"
	}
	mem, ok := cgroupDir(mounts, "memory", rel)
	if !ok {
		return nil, "the cgroup v1 memory hierarchy is not mounted"
	}
	if err := tryMkdir(mem, pid); err != nil {
		return nil, fmt.Sprintf("cannot make a cgroup v1 in %s: %v", mem, unwrap(err))
	}
	c := &cgroups{mem: mem}
	if rel, ok := own["pids"]; ok {
		if dir, ok := cgroupDir(mounts, "pids", rel); ok && tryMkdir(dir, pid) == nil {
			c.pids = dir
		}
	}
	return c, ""
}

func tryMkdir(dir string, pid int) error {
	probe := filepath.Join(dir, fmt.Sprintf("sparkles-%d-probe", pid))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return unix.Rmdir(probe)
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
	return &cgroups{v2: dir}, ""
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

// parents are the cgroups agents' cgroups are made in.
func (c *cgroups) parents() []string {
	if c.v2 != "" {
		return []string{c.v2}
	}
	if c.pids == "" {
		return []string{c.mem}
	}
	return []string{c.mem, c.pids}
}

// cleanStale removes the agents' cgroups a server left that is gone (one
// that was SIGKILLed could not): they are named sparkles-<pid>-…, and one
// that still holds a process cannot be removed.
func (c *cgroups) cleanStale() {
	for _, parent := range c.parents() {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), "sparkles-")
			if !ok || !e.IsDir() {
				continue
			}
			num, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(num)
			if err != nil || pid == os.Getpid() {
				continue
			}
			if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
				_ = unix.Rmdir(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// create makes one agent's cgroup; nil without cgroups.
func (c *cgroups) create(name string, maxProcs int, memoryMax int64) (*cgroup, error) {
	if c == nil {
		return nil, nil
	}
	base := fmt.Sprintf("sparkles-%d-%s-%d", os.Getpid(), name, c.seq.Add(1))
	cg := &cgroup{v1: c.v2 == "", fd: -1}
	for _, parent := range c.parents() {
		dir := filepath.Join(parent, base)
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, err
		}
		cg.dirs = append(cg.dirs, dir)
	}
	procs, mem := strconv.Itoa(maxProcs), strconv.FormatInt(memoryMax, 10)
	var set [][2]string // file, value, in an order the kernel accepts
	if cg.v1 {
		set = append(set, [2]string{filepath.Join(cg.dirs[0], "memory.limit_in_bytes"), mem})
		// With swap accounted, memory.memsw bounds memory and swap
		// together; it must not be below memory.limit_in_bytes.
		if memsw := filepath.Join(cg.dirs[0], "memory.memsw.limit_in_bytes"); exists(memsw) {
			set = append(set, [2]string{memsw, mem})
		}
		if len(cg.dirs) > 1 {
			set = append(set, [2]string{filepath.Join(cg.dirs[1], "pids.max"), procs})
		}
	} else {
		set = append(set, [2]string{filepath.Join(cg.dirs[0], "pids.max"), procs}, [2]string{filepath.Join(cg.dirs[0], "memory.max"), mem})
	}
	for _, s := range set {
		if err := os.WriteFile(s[0], []byte(s[1]), 0o644); err != nil {
			cg.remove()
			return nil, fmt.Errorf("set %s: %w", filepath.Base(s[0]), err)
		}
	}
	if cg.v1 {
		return cg, nil
	}
	// Without swap limited too, memory.max only moves the agent to swap.
	_ = os.WriteFile(filepath.Join(cg.dirs[0], "memory.swap.max"), []byte("0"), 0o644)
	fd, err := unix.Open(cg.dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		cg.remove()
		return nil, err
	}
	cg.fd = fd
	return cg, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// join moves the launcher, pid, into a v1 cgroup, all its threads with
// it. A v2 cgroup holds it from its clone already.
func (cg *cgroup) join(pid int) error {
	if cg == nil || !cg.v1 {
		return nil
	}
	for _, dir := range cg.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move the launcher into %s: %w", dir, err)
		}
	}
	return nil
}

// oomKills is how many of the agent's processes the kernel killed at its
// memory limit.
func (cg *cgroup) oomKills() int {
	if cg == nil {
		return 0
	}
	file := "memory.events"
	if cg.v1 {
		file = "memory.oom_control"
	}
	b, err := os.ReadFile(filepath.Join(cg.dirs[0], file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
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
func (cg *cgroup) remove() error {
	if cg == nil {
		return nil
	}
	cg.closeFD()
	var errs []error
	for _, dir := range cg.dirs {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// parseProcCgroup reads /proc/self/cgroup: each controller's cgroup path,
// and the v2 one under "".
func parseProcCgroup(b []byte) map[string]string {
	own := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-id:controller,list:path
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			own[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	return own
}

// cgroupMount is a cgroup hierarchy's mount from /proc/self/mountinfo.
type cgroupMount struct {
	root, point string
	controllers []string // v1; none for v2
	v2          bool
}

func parseCgroupMounts(b []byte) []cgroupMount {
	var out []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 || (p[0] != "cgroup" && p[0] != "cgroup2") {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), v2: p[0] == "cgroup2"}
		if !m.v2 {
			m.controllers = strings.Split(p[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// cgroupDir is where cgroup path (as /proc/self/cgroup says it) of the
// controller's hierarchy ("" for v2) is in this mount namespace: below a
// mount of that hierarchy whose root holds it.
func cgroupDir(mounts []cgroupMount, controller, path string) (string, bool) {
	for _, m := range mounts {
		if m.v2 != (controller == "") || (!m.v2 && !slices.Contains(m.controllers, controller)) {
			continue
		}
		if !within(path, m.root) {
			continue
		}
		rel := strings.TrimPrefix(path, m.root)
		return filepath.Join(m.point, rel), true
	}
	return "", false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
