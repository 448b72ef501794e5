package confine

import "testing"

// TestPrepareLeavesCgroups: Prepare does not look for the cgroups that
// limit agents (on cgroup v1 that check makes and removes a cgroup in each
// hierarchy, on the server's way to its first answer); the first caller
// that needs them does, once, and every later one gets the same answer.
func TestPrepareLeavesCgroups(t *testing.T) {
	l, err := Prepare(Options{DataDir: t.TempDir(), Network: NetworkNone})
	if err != nil {
		t.Skip("this machine cannot confine:", err)
	}
	if l.cg != nil || l.cgWhy != "" {
		t.Fatalf("Prepare looked for the cgroups: %+v %q", l.cg, l.cgWhy)
	}
	cg, why := l.cgroups()
	if cg == nil && why == "" {
		t.Fatal("cgroups: neither cgroups nor why there are none")
	}
	if again, againWhy := l.cgroups(); again != cg || againWhy != why {
		t.Fatalf("cgroups asked again: %+v %q, want %+v %q", again, againWhy, cg, why)
	}
	t.Logf("cgroups: %+v %q; isolation %s", cg, why, l.Isolation())
}
