//go:build linux

package confine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/confine"
)

// TestDataDirInSystemDir: a data dir inside a directory every agent reads
// (/opt/sparkles, as a package might put it) is covered in the agent's
// view: its token is not there, its own sandbox is.
func TestDataDirInSystemDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("making a directory in /opt needs root (CI runs as root)")
	}
	base, err := os.MkdirTemp("/opt", "sparkles-confine-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755) // as a package's directory would be
	data := filepath.Join(base, "data")
	work := filepath.Join(data, "sandboxes", "c_opt", "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o755) // loose, so that only the cover keeps the token away
	token := filepath.Join(data, "token")
	if err := os.WriteFile(token, []byte("secret"), 0o644); err != nil { // readable by anyone who reaches it
		t.Fatal(err)
	}
	l := newLauncher(t, confine.Options{DataDir: data})
	out, err := runConfined(t, l, filepath.Dir(work), []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c",
		"if cat "+token+" 2>/dev/null; then echo read-token; fi; echo ok > w && cat w")
	if err != nil || strings.Contains(out, "read-token") || !strings.Contains(out, "ok") {
		t.Fatalf("confined: %v\n%s", err, out)
	}
}
