//go:build linux

package confine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeCgroup lays out the files of a cgroup v2 directory in an ordinary
// one: enough to test the decisions, not the kernel's enforcement, which
// needs a delegated cgroup v2 with the pids and memory controllers.
func fakeCgroup(t *testing.T, controllers, subtree string) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(subtree+"\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "sparkles-server"), 0o755)
	return dir
}

// TestCgroupDelegation: cgroup limits are used only in a cgroup v2 that is
// the server's to manage, with pids and memory; otherwise rlimits only,
// with the reason for the log.
func TestCgroupDelegation(t *testing.T) {
	t.Run("ErrNoControllers", func(t *testing.T) {
		dir := fakeCgroup(t, "cpu io", "")
		if cg, why := delegated(dir, 1000, 1); cg != nil || !strings.Contains(why, "pids controller") {
			t.Fatalf("delegated = %v, %q", cg, why)
		}
	})
	t.Run("ErrNotDelegated", func(t *testing.T) {
		dir := fakeCgroup(t, "cpu memory pids", "memory pids")
		// Root owns everything, so ownership says nothing for root.
		if cg, why := delegated(dir, 0, 1); cg != nil || !strings.Contains(why, "not delegated") {
			t.Fatalf("delegated = %v, %q", cg, why)
		}
		if cg, why := delegated(dir, os.Getuid()+1, 1); cg != nil || !strings.Contains(why, "not delegated") {
			t.Fatalf("another user's: %v, %q", cg, why)
		}
	})
	t.Run("OK", func(t *testing.T) {
		dir := fakeCgroup(t, "cpu memory pids", "")
		// systemd's Delegate= marks the cgroup; for a user other than root,
		// owning it is enough.
		if err := unix.Setxattr(dir, "user.delegate", []byte("1"), 0); err != nil && os.Getuid() == 0 {
			t.Skipf("no user xattrs here (%v), and root needs the delegate mark", err)
		}
		cg, why := delegated(dir, os.Getuid(), 4242)
		if cg == nil {
			t.Fatalf("not delegated: %s", why)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "sparkles-server", "cgroup.procs")); string(b) != "4242" {
			t.Errorf("the server was not moved to its leaf: %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); string(b) != "+pids +memory" {
			t.Errorf("subtree_control = %q", b)
		}
		a, err := cg.create("c_1", 64, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		for file, want := range map[string]string{"pids.max": "64", "memory.max": "1073741824"} {
			if b, _ := os.ReadFile(filepath.Join(a.dirs[0], file)); string(b) != want {
				t.Errorf("%s = %q, want %q", file, b, want)
			}
		}
		a.closeFD()
	})
}

// TestCgroupPaths: the server's own cgroups are found from
// /proc/self/cgroup and mountinfo, also where a hierarchy is mounted from
// below its root (a container's view).
func TestCgroupPaths(t *testing.T) {
	self := parseProcCgroup([]byte("9:name=systemd:/\n8:pids:/\n4:memory:/docker/abc/x\n2:cpu,cpuacct:/\n0::/user.slice\n"))
	for c, want := range map[string]string{"pids": "/", "memory": "/docker/abc/x", "cpuacct": "/", "": "/user.slice"} {
		if got := self[c]; got != want {
			t.Errorf("%q: %q, want %q", c, got, want)
		}
	}
	mounts := parseCgroupMounts([]byte(`30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 30 0:31 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:37 / /sys/fs/cgroup/my\040unified rw,relatime - cgroup2 cgroup2 rw
`))
	for _, c := range []struct{ controller, path, want string }{
		{"memory", "/docker/abc/x", "/sys/fs/cgroup/memory/x"},
		{"pids", "/", "/sys/fs/cgroup/pids"},
		{"", "/user.slice", "/sys/fs/cgroup/my unified/user.slice"},
	} {
		if got, ok := cgroupDir(mounts, c.controller, c.path); !ok || got != c.want {
			t.Errorf("%s %s: %q %v, want %q", c.controller, c.path, got, ok, c.want)
		}
	}
	if got, ok := cgroupDir(mounts, "memory", "/elsewhere"); ok {
		t.Errorf("a cgroup outside the mount's root: %q", got)
	}
	if _, ok := cgroupDir(mounts, "cpu", "/"); ok {
		t.Error("a controller that is not mounted was found")
	}
}

// TestCgroupV1: an agent's v1 cgroups have its limits, hold the process
// joined to them, tell of OOM kills, and go when it is gone; a server's
// leftovers are removed when that server is gone.
func TestCgroupV1(t *testing.T) {
	c, why := openCgroups()
	if c == nil || c.mechanism() != "cgroup1" {
		if os.Getuid() == 0 && os.Getenv("CI") != "" {
			t.Fatalf("CI runs as root with cgroup v1: %v %s", c, why)
		}
		t.Skipf("no cgroup v1 this process may write: %s", why)
	}
	stale := filepath.Join(c.mem, "sparkles-999999999-c_gone-1")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	c.cleanStale()
	if _, err := os.Stat(stale); err == nil {
		unix.Rmdir(stale)
		t.Error("a gone server's cgroup was left")
	}
	cg, err := c.create("c_test", 40, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ dir, file, want string }{
		{cg.dirs[0], "memory.limit_in_bytes", "268435456"},
		{cg.dirs[len(cg.dirs)-1], "pids.max", "40"},
	} {
		if b, _ := os.ReadFile(filepath.Join(f.dir, f.file)); strings.TrimSpace(string(b)) != f.want {
			t.Errorf("%s = %q, want %s", f.file, b, f.want)
		}
	}
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for _, dir := range cg.dirs {
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); strings.TrimSpace(string(b)) != strconv.Itoa(cmd.Process.Pid) {
			t.Errorf("%s holds %q, want the process", dir, b)
		}
	}
	if err := cg.remove(); err == nil {
		t.Error("a cgroup that holds a process was removed")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if n := cg.oomKills(); n != 0 {
		t.Errorf("oomKills = %d", n)
	}
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range cg.dirs {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s is left", dir)
		}
	}
}
