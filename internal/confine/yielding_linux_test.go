package confine

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// niceOf is the nice value of a process started now, read by itself from
// /proc/self/stat (field 19).
func niceOf(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "cut -d' ' -f19 /proc/self/stat").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// The probe's processes run at probeNice, and nothing else of the server
// does: the thread that started them ends with them.
func TestYieldingRaisesOnlyItsProcesses(t *testing.T) {
	before := niceOf(t)
	var inside string
	if err := yielding(probeNice, func() error { inside = niceOf(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside != "10" {
		t.Fatalf("a process the probe starts runs at nice %s, want 10", inside)
	}
	// Processes started afterwards, from whatever thread, keep the
	// server's priority.
	for range 20 {
		if got := niceOf(t); got != before {
			t.Fatalf("a process started after the probe runs at nice %s, want %s as before it", got, before)
		}
	}
}

// A yielding call inside another (the server's confinement check, which
// yields, runs the probe, which yields too) runs on the thread the outer
// one holds, at the same nice value, instead of starting a thread more.
func TestYieldingNested(t *testing.T) {
	var outer, inner int
	var inside string
	err := yielding(probeNice, func() error {
		outer = syscall.Gettid()
		return yielding(probeNice, func() error {
			inner, inside = syscall.Gettid(), niceOf(t)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if outer == syscall.Gettid() {
		t.Fatal("the outer call ran on the caller's thread")
	}
	if inner != outer || inside != "10" {
		t.Fatalf("the inner call ran on thread %d at nice %s, want the outer's %d at 10", inner, inside, outer)
	}
}
