//go:build linux

package confine

import (
	"os"
	"path/filepath"
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
			if b, _ := os.ReadFile(filepath.Join(a.dir, file)); string(b) != want {
				t.Errorf("%s = %q, want %q", file, b, want)
			}
		}
		a.closeFD()
	})
}
