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
		got, err := lookPath("tool")
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
