//go:build linux

package confine

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoLandlockFailsClosed: without Landlock, New refuses, and so does the
// launcher itself if told to run an agent anyway: the probe, run for real
// with a Landlock ABI of 0, ends in an error and no agent runs.
func TestNoLandlockFailsClosed(t *testing.T) {
	if err := requireLandlock(0); err == nil || !strings.Contains(err.Error(), "no Landlock") {
		t.Fatalf("requireLandlock(0) = %v", err)
	}
	self, err := filepath.EvalSymlinks("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	l := &Launcher{
		opts: Options{Network: NetworkOpen, MaxProcs: DefaultMaxProcs, MemoryMax: DefaultMemoryMax, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)},
		abi:  0, self: self,
	}
	err = l.probe()
	if err == nil || !strings.Contains(err.Error(), "Landlock is not available") {
		t.Fatalf("probe without Landlock = %v, want the launcher's refusal", err)
	}
}
