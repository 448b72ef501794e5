//go:build linux

package confine

import (
	"slices"
	"testing"
)

// TestKeeps: under each cover the launcher binds back the outermost given
// paths only, and leaves uncovered a directory that is itself given.
func TestKeeps(t *testing.T) {
	sp := &spec{
		Path:    "/home/op/.cache/agents/node_modules/x/index.js",
		Sandbox: "/home/op/.local/share/sparkles/sandboxes/c_1",
		Read:    []string{"/home/op/.cache/agents/node_modules", "/run/systemd/resolve/stub-resolv.conf"},
		Mask:    []string{"/tmp", "/run", "/home/op"},
	}
	if got, want := keepsUnder(sp, "/home/op"), []string{"/home/op/.local/share/sparkles/sandboxes/c_1", "/home/op/.cache/agents/node_modules"}; !slices.Equal(got, want) {
		t.Errorf("keeps under the home: %q, want %q", got, want)
	}
	if got, want := keepsUnder(sp, "/run"), []string{"/run/systemd/resolve/stub-resolv.conf"}; !slices.Equal(got, want) {
		t.Errorf("keeps under /run: %q, want %q", got, want)
	}
	sp.Write = []string{"/tmp"}
	if got := coverable(sp); slices.Contains(got, "/tmp") {
		t.Errorf("coverable = %q: a given /tmp was covered", got)
	}
}
