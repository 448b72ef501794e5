// Package nobody runs a test again as the unprivileged user nobody, for
// what differs between a server that is root (as CI runs the suite) and
// one that is not (as on a developer's laptop): file permissions above
// all, which root overrides.
package nobody

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// envVar marks the run as nobody, so that it does not run itself again.
const envVar = "SPARKLES_TEST_AS_NOBODY"

// uid and gid of nobody on Linux distributions.
const uid, gid = 65534, 65534

// Also runs the current top-level test again as nobody when the test
// process is root, in a copy of the test binary, and fails t if that run
// fails; it does nothing when the process is not root or is that run
// already. Call it after the test's own body: as root the test then covers
// both.
func Also(t *testing.T) {
	t.Helper()
	Tests(t, "^"+t.Name()+"$")
}

// Instead runs the current top-level test as nobody in place of root, and
// reports whether it did (the caller then returns): for a test whose
// point root would miss (modes that do not bind root). Run as anyone
// else, or in that run, it reports false and the test goes on.
func Instead(t *testing.T) bool {
	t.Helper()
	if os.Getuid() != 0 || os.Getenv(envVar) != "" {
		return false
	}
	Tests(t, "^"+t.Name()+"$")
	return true
}

// Tests runs the tests of the package that match pattern (a -test.run
// pattern) as nobody when the process is root, and fails t unless they
// all pass and none skips: a skip as nobody would be a case not covered.
// It does nothing when the process is not root or is that run already.
func Tests(t *testing.T, pattern string) {
	t.Helper()
	if os.Getuid() != 0 || os.Getenv(envVar) != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Outside the test's own temporary directories, which are 0700.
	dir, err := os.MkdirTemp("", "sparkles-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "test.bin")
	if err := CopyExe(exe, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{envVar + "=1", "PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir}
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("\nPASS\n")) || bytes.Contains(out, []byte("--- SKIP")) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

// CopyExe copies the program at from to to, executable by anyone: a test
// binary rerun as nobody must be where nobody can read it.
func CopyExe(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
