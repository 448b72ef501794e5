package datadir_test

import (
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// TestLayout pins the layout: the data dirs of earlier versions hold these
// names, and a server that looked elsewhere would not find its sandboxes.
func TestLayout(t *testing.T) {
	d := datadir.Dir(filepath.FromSlash("/data"))
	sb := d.Sandbox("sb_1")
	for _, tc := range []struct{ got, want string }{
		{d.Store(), "/data/sparkles.db"},
		{d.Token(), "/data/token"},
		{d.Sandboxes(), "/data/sandboxes"},
		{string(sb), "/data/sandboxes/sb_1"},
		{sb.Work(), "/data/sandboxes/sb_1/work"},
		{sb.Home(), "/data/sandboxes/sb_1/home"},
		{sb.Tmp(), "/data/sandboxes/sb_1/tmp"},
		{sb.Snapshots(), "/data/sandboxes/sb_1/snapshots"},
		{sb.AgentLog(), "/data/sandboxes/sb_1/agent.log"},
		{sb.Source(), "/data/sandboxes/sb_1/source"},
		{d.Checks(), "/data/checks"},
		{d.Check("agent-x").Work(), "/data/checks/agent-x/work"},
	} {
		if got, want := tc.got, filepath.FromSlash(tc.want); got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}
