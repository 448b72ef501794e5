package confine

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRemoveProbeLeftovers: the scratch directories of probes that did not
// end are removed, whatever they hold; one whose lock is held (a probe that
// runs) stays, and so does everything that is not a probe's directory.
func TestRemoveProbeLeftovers(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	mk := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(base, ".confine-probe-1", "sandbox", "work", "probe"))
	mk(filepath.Join(base, ".confine-probe-1", "canary"))
	if err := os.Mkdir(filepath.Join(base, ".confine-probe-empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(base, ".confine-probe-running", "canary"))
	mk(filepath.Join(base, "keep", "file"))
	mk(filepath.Join(base, ".confine-probe-file"))
	mk(filepath.Join(outside, "target", "file"))
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(base, ".confine-probe-link")); err != nil {
		t.Fatal(err)
	}
	running, err := os.Open(filepath.Join(base, ".confine-probe-running"))
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	if err := syscall.Flock(int(running.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	removeProbeLeftovers(base)

	for name, want := range map[string]bool{
		".confine-probe-1":       false,
		".confine-probe-empty":   false,
		".confine-probe-running": true,
		"keep/file":              true,
		".confine-probe-file":    true,
		".confine-probe-link":    true,
	} {
		_, err := os.Lstat(filepath.Join(base, name))
		if got := err == nil; got != want {
			t.Errorf("%s: there %v, want %v (%v)", name, got, want, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "target", "file")); err != nil {
		t.Errorf("the symlink's target was touched: %v", err)
	}
	// Once its probe has ended (its lock let go), the next start removes it.
	running.Close()
	removeProbeLeftovers(base)
	if _, err := os.Lstat(filepath.Join(base, ".confine-probe-running")); !os.IsNotExist(err) {
		t.Errorf("an ended probe's directory stayed: %v", err)
	}
}
