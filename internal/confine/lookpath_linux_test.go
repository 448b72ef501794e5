//go:build linux

package confine

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookPath: the PATH's directories are looked in at once, and the
// answer is exec.LookPath's: the first directory in PATH order that holds
// the name as an executable file, and an error where that directory is a
// relative one.
func TestLookPath(t *testing.T) {
	root := t.TempDir()
	dir := func(name string, mode os.FileMode) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if mode != 0 {
			if err := os.WriteFile(filepath.Join(d, "tool"), []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	empty, plain, first, second := dir("empty", 0), dir("plain", 0o644), dir("first", 0o755), dir("second", 0o755)
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	for _, c := range []struct {
		path []string
		want string
	}{
		{[]string{empty, plain, first, second}, filepath.Join(first, "tool")},
		{[]string{second, first}, filepath.Join(second, "tool")},
		{[]string{"", ".", "sub", empty, second}, filepath.Join(second, "tool")},
		{[]string{empty, "first", second}, ""},
		{[]string{empty, plain, "first"}, ""},
		{nil, ""},
	} {
		t.Setenv("PATH", strings.Join(c.path, string(filepath.ListSeparator)))
		got, err := lookPath("tool", os.Getenv("PATH"))
		want, wantErr := exec.LookPath("tool")
		if wantErr != nil {
			want = ""
		}
		if got != c.want || want != c.want || (err == nil) != (wantErr == nil) {
			t.Errorf("PATH=%q: %q %v; exec.LookPath %q %v; want %q", c.path, got, err, want, wantErr, c.want)
		}
		if err != nil && !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, exec.ErrDot) {
			t.Errorf("PATH=%q: %v, want exec.ErrNotFound or exec.ErrDot", c.path, err)
		}
		if err != nil && errors.Is(err, exec.ErrDot) != errors.Is(wantErr, exec.ErrDot) {
			t.Errorf("PATH=%q: %v; exec.LookPath: %v", c.path, err, wantErr)
		}
	}
}

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
	if fresh := findPasta(withPasta); fresh == r {
		t.Fatalf("a look now finds %+v too: the test proves nothing", fresh)
	}
	if got := <-pastaLookup(); got != r {
		t.Errorf("after LookAhead: %+v, want the look it began, %+v", got, r)
	}
	if pastaAhead.Load() != nil {
		t.Error("the look is still there for another Prepare")
	}
	if got, want := <-pastaLookup(), findPasta(withPasta); got != want {
		t.Errorf("a second Prepare: %+v, want a look of its own, %+v", got, want)
	}
	if err := os.WriteFile(pasta, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", without)
	LookAhead()
	t.Setenv("PATH", withPasta)
	if got, want := <-pastaLookup(), findPasta(withPasta); got != want {
		t.Errorf("PATH changed after LookAhead: %+v, want a look on the new PATH, %+v", got, want)
	}
}
