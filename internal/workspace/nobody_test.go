package workspace_test

import (
	"os"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/nobody"
)

// TestUnprivileged: the writes and unpacks hold for a server that is not
// root (its files keep its own owner; modes bind it), as on a
// developer's laptop. As root it reruns them as nobody; as anyone else
// they ran as that user already.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not root: the other tests ran unprivileged")
	}
	nobody.Tests(t, "^(TestWriteFile|TestUnpack|TestUnpackRefused|TestArchive|TestSwappedLink)$")
}
