package workspace_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

const asNobodyVar = "SPARKLES_WORKSPACE_TEST_AS_NOBODY"

// TestUnprivileged: the writes and unpacks hold for a server that is not
// root (its files keep its own owner; modes bind it), as on a
// developer's laptop. As root it reruns them as nobody; as anyone else
// they ran as that user already.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not root: the other tests ran unprivileged")
	}
	asNobody(t, "^(TestWriteFile|TestUnpack|TestUnpackRefused|TestArchive|TestSwappedLink)$")
}

// asNobody reruns the calling test (or the tests of pattern) as the user
// nobody when it runs as root, where file modes do not bind, and reports
// whether it did (the caller then returns). Run as anyone else, the test
// is that user's run.
func asNobody(t *testing.T, pattern ...string) bool {
	t.Helper()
	if os.Getuid() != 0 || os.Getenv(asNobodyVar) != "" {
		return false
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("", "workspace-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "workspace.test")
	if err := copyExe(exe, bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	run := "^" + t.Name() + "$"
	if len(pattern) > 0 {
		run = pattern[0]
	}
	cmd := exec.Command(bin, "-test.run="+run, "-test.count=1", "-test.v")
	cmd.Dir = home
	cmd.Env = []string{asNobodyVar + "=1", "PATH=/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("\nPASS\n")) || bytes.Contains(out, []byte("--- SKIP")) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	return true
}

func copyExe(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
