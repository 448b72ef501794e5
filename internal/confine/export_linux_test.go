package confine

import "testing"

// SetForceGuard makes New find no cgroup, as on a machine where the server
// may make none, so that the launcher's memory guard bounds agents' memory;
// until the test ends.
func SetForceGuard(t testing.TB) {
	hooks.noCgroups = true
	t.Cleanup(func() { hooks.noCgroups = false })
}
