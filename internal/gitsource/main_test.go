package gitsource_test

import (
	"os"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/confine"
)

// TestMain: the test binary is its own launcher, as sparkles is, so git
// runs confined exactly as the server runs it.
func TestMain(m *testing.M) {
	if confine.IsEntry(os.Args) {
		confine.Main()
	}
	os.Exit(m.Run())
}
