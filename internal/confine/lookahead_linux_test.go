//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLookAhead: a Prepare after LookAhead takes the look LookAhead began
// when the PATH is the same, once; with another PATH it looks again.
func TestLookAhead(t *testing.T) {
	withPasta, without := t.TempDir(), t.TempDir()
	pasta := filepath.Join(withPasta, "pasta")
	if err := os.WriteFile(pasta, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", withPasta)
	LookAhead()
	// Let the look end, then take pasta away: only a look made before
	// still finds it.
	a := pastaAhead.Load()
	r := <-a.found
	a.found <- r
	if err := os.Remove(pasta); err != nil {
		t.Fatal(err)
	}
	if fresh := findPasta(); fresh == r {
		t.Fatalf("a look now finds %+v too: the test proves nothing", fresh)
	}
	if got := <-pastaLookup(); got != r {
		t.Errorf("after LookAhead: %+v, want the look it began, %+v", got, r)
	}
	if pastaAhead.Load() != nil {
		t.Error("the look is still there for another Prepare")
	}
	if got, want := <-pastaLookup(), findPasta(); got != want {
		t.Errorf("a second Prepare: %+v, want a look of its own, %+v", got, want)
	}
	if err := os.WriteFile(pasta, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", without)
	LookAhead()
	t.Setenv("PATH", withPasta)
	if got, want := <-pastaLookup(), findPasta(); got != want {
		t.Errorf("PATH changed after LookAhead: %+v, want a look on the new PATH, %+v", got, want)
	}
}
