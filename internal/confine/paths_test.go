//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestInstallPaths: an agent reads its own install and nothing around it:
// a node_modules/.bin link gives the whole node_modules tree (a package
// requires its neighbours), a script's interpreter found through env on the
// server's PATH gives its prefix, a plain binary gives itself, and nothing
// given contains a protected path.
func TestInstallPaths(t *testing.T) {
	root := t.TempDir()
	prefix := filepath.Join(root, "agents")
	pkg := filepath.Join(prefix, "node_modules", "@acme", "agent")
	nodePrefix := filepath.Join(root, "nodejs")
	for _, d := range []string{filepath.Join(pkg, "dist"), filepath.Join(prefix, "node_modules", ".bin"), filepath.Join(nodePrefix, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(pkg, "dist", "index.js")
	os.WriteFile(script, []byte("#!/usr/bin/env node\nconsole.log(1)\n"), 0o755)
	os.WriteFile(filepath.Join(nodePrefix, "bin", "node"), []byte("\x7fELF"), 0o755)
	bin := filepath.Join(prefix, "node_modules", ".bin", "agent")
	os.Symlink("../@acme/agent/dist/index.js", bin)
	plain := filepath.Join(root, "tools", "agent")
	os.MkdirAll(filepath.Dir(plain), 0o755)
	os.WriteFile(plain, []byte("\x7fELF"), 0o755)
	t.Setenv("PATH", filepath.Join(nodePrefix, "bin"))

	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := installPaths(real, nil), []string{filepath.Join(prefix, "node_modules"), nodePrefix}; !slices.Equal(got, want) {
		t.Errorf("node agent: %q, want %q", got, want)
	}
	if got, want := installPaths(plain, nil), []string{plain}; !slices.Equal(got, want) {
		t.Errorf("plain binary: %q, want %q", got, want)
	}
	// The interpreter's prefix holds the data dir: only the interpreter.
	if got, want := installPaths(real, []string{filepath.Join(nodePrefix, "share", "sparkles")}), []string{filepath.Join(prefix, "node_modules"), filepath.Join(nodePrefix, "bin", "node")}; !slices.Equal(got, want) {
		t.Errorf("protected prefix: %q, want %q", got, want)
	}
	if got := installPaths("/usr/bin/env", nil); len(got) != 0 {
		t.Errorf("a system binary: %q, want nothing beyond the system", got)
	}
}

// TestCleanPaths: an operator path must be absolute and exist, and may not
// contain the data dir or the home.
func TestCleanPaths(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "home", "data")
	os.MkdirAll(data, 0o700)
	if _, err := cleanPaths("ReadPaths", []string{"relative"}, nil); err == nil {
		t.Error("a relative path was taken")
	}
	if _, err := cleanPaths("ReadPaths", []string{filepath.Join(root, "missing")}, nil); err == nil {
		t.Error("a missing path was taken")
	}
	if _, err := cleanPaths("ReadPaths", []string{filepath.Join(root, "home")}, []string{data}); err == nil {
		t.Error("a path holding the data dir was taken")
	}
	if got, err := cleanPaths("ReadPaths", []string{data}, []string{filepath.Join(root, "other")}); err != nil || len(got) != 1 {
		t.Errorf("cleanPaths = %q, %v", got, err)
	}
}

// TestPrivateEnv: the server's HOME becomes the sandbox's, TMPDIR is the
// sandbox's unless the sandbox's env chose one, and a HOME the sandbox's
// env chose is kept (its env wins over the base, docs/agents.md).
func TestPrivateEnv(t *testing.T) {
	got := privateEnv([]string{"PATH=/bin", "HOME=/home/op"}, "/home/op", "/s/home", "/s/tmp")
	if want := []string{"PATH=/bin", "HOME=/s/home", "TMPDIR=/s/tmp"}; !slices.Equal(got, want) {
		t.Errorf("base env: %q, want %q", got, want)
	}
	got = privateEnv([]string{"HOME=/elsewhere", "TMPDIR=/x"}, "/home/op", "/s/home", "/s/tmp")
	if want := []string{"HOME=/elsewhere", "TMPDIR=/x"}; !slices.Equal(got, want) {
		t.Errorf("sandbox env: %q, want %q", got, want)
	}
}
