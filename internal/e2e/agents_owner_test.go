package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/confine"
)

// giveToAgents makes dir, an agent's write path, the agents' to write: a
// root server runs them as confine.AgentID, and its operator chowns what
// it lets them write, as the refusal at start tells.
func giveToAgents(t *testing.T, dir string) {
	t.Helper()
	if os.Getuid() != 0 {
		return
	}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, confine.AgentID, confine.AgentID)
	})
	if err != nil {
		t.Fatal(err)
	}
}
