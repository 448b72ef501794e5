package gitsource_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/nobody"
)

// nobodyVar marks the run of the test binary as nobody.
const nobodyVar = "SPARKLES_GITSOURCE_TEST_AS_NOBODY"

// alsoAsNobody, run as root, runs the test again as nobody, where git runs
// as the server's own uid rather than AgentID: the clone is then the
// server user's. Not internal/nobody: git's network is open, and pasta
// as nobody needs the tun device readable and writable by all (mode 0666,
// as distributions make it), which some machines keep root's; the run
// then gets one in a mount namespace of its own, as the confinement
// tests do.
//
// subtests is the -test.run pattern of the subtests to run again: those
// whose files could differ. Each costs a confined clone more, so few.
func alsoAsNobody(t *testing.T, subtests string) {
	t.Helper()
	if os.Getuid() != 0 || os.Getenv(nobodyVar) != "" {
		return
	}
	name := t.Name()
	t.Run("nobody", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "gitsource-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "gitsource.test")
		if err := nobody.CopyExe(exe, bin); err != nil {
			t.Fatal(err)
		}
		tun := filepath.Join(dir, "tun")
		if err := os.Mkdir(tun, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^"+name+"$/"+subtests, "-test.count=1", "-test.v")
		cmd.Dir = dir
		cmd.Env = []string{nobodyVar + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir, "CI=" + os.Getenv("CI")}
		asNobody(cmd, tun)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		// A pattern that matched no subtest would pass too: one must run.
		ran := bytes.Contains(out.Bytes(), []byte("--- PASS: "+name+"/"))
		if err != nil || !ran || bytes.Contains(out.Bytes(), []byte("--- SKIP")) {
			t.Fatalf("as nobody: %v\n%s", err, out.String())
		}
	})
}

// asNobody makes cmd run as nobody, with a tun device of mode 0666 in a
// mount namespace of its own (made in tun, a directory of root's) where
// this machine's is not.
func asNobody(cmd *exec.Cmd, tun string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 == 0o006 {
		return
	}
	sh := `set -e; mount --make-rslave /; mount -t tmpfs tmpfs "$1"
mknod -m 666 "$1/tun" c 10 200; mount --bind "$1/tun" /dev/net/tun; shift
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`
	cmd.Args = append([]string{"/bin/sh", "-c", sh, "sh", tun, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
}
