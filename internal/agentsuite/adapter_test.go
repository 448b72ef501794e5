package agentsuite

import (
	"os"
	"strings"
	"testing"
)

// TestPinnedInCI checks that .ci/run installs every adapter at the version
// the suite pins, so that CI never runs an adapter the suite does not
// describe, nor skips one it does.
func TestPinnedInCI(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if len(All()) == 0 {
		t.Fatal("no adapter is registered")
	}
	for _, a := range All() {
		if !strings.Contains(string(b), " "+a.Package+" ") && !strings.Contains(string(b), " "+a.Package+"\n") {
			t.Errorf(".ci/run does not install %s", a.Package)
		}
	}
}
