//go:build linux

package confine

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArgGrants: the paths an agent's command line names are given as the
// command is: a file alone, or the outermost node_modules it lives in, a
// directory as a directory, after '=' too and by their real path; nothing
// for the command itself, relative or missing paths, system paths, the
// agent's own /tmp or /dev, or a socket; a node_modules that holds a
// protected path narrows to the file; a directory holding a protected
// path, or a path in the data dir, is refused by name.
func TestArgGrants(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p, body string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := mk(filepath.Join(root, "outside", "script.sh"), "echo hi\n")
	conf := mk(filepath.Join(root, "etc", "agent.toml"), "x = 1\n")
	nm := filepath.Join(root, "agents", "node_modules")
	index := mk(filepath.Join(nm, "@acme", "agent", "dist", "index.js"), "require('dep')\n")
	mk(filepath.Join(nm, "dep", "index.js"), "\n")
	dir := filepath.Join(root, "tools")
	os.MkdirAll(dir, 0o755)
	link := filepath.Join(root, "current")
	os.Symlink(filepath.Join(root, "outside"), link)
	data := filepath.Join(root, "data")
	token := mk(filepath.Join(data, "token"), "secret")
	home := filepath.Join(root, "home")
	inHome := mk(filepath.Join(home, ".local", "node_modules", "a", "x.js"), "\n")
	homeNM := mk(filepath.Join(root, "h2", "node_modules", "b", "y.js"), "\n")
	protectedInNM := filepath.Join(root, "h2", "node_modules", "home")
	os.MkdirAll(protectedInNM, 0o755)
	sock := filepath.Join(root, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	protected := []string{data, home}

	for _, tc := range []struct {
		name       string
		args       []string
		argv, read []string
		protected  []string
	}{
		{"a file", []string{"/bin/sh", script}, []string{"/bin/sh", script}, []string{script}, nil},
		{"after =", []string{"agent", "--config=" + conf}, []string{"agent", "--config=" + conf}, []string{conf}, nil},
		{"in node_modules", []string{"node", index}, []string{"node", index}, []string{nm}, nil},
		{"a directory", []string{"agent", "--tools", dir}, []string{"agent", "--tools", dir}, []string{dir}, nil},
		{"a directory in node_modules", []string{"node", filepath.Dir(index)}, []string{"node", filepath.Dir(index)}, []string{nm}, nil},
		{"by its real path", []string{"sh", filepath.Join(link, "script.sh"), "--c=" + filepath.Join(link, "script.sh")},
			[]string{"sh", script, "--c=" + script}, []string{script}, nil},
		{"not the command", []string{script}, []string{script}, nil, nil},
		{"relative", []string{"node", "dist/index.js", "--config=etc/agent.toml", "argpaths.go"},
			[]string{"node", "dist/index.js", "--config=etc/agent.toml", "argpaths.go"}, nil, nil},
		{"missing", []string{"node", filepath.Join(root, "nope.js"), "--x=" + filepath.Join(root, "nope")},
			[]string{"node", filepath.Join(root, "nope.js"), "--x=" + filepath.Join(root, "nope")}, nil, nil},
		{"system", []string{"sh", "/etc/passwd", "--x=/usr/bin"}, []string{"sh", "/etc/passwd", "--x=/usr/bin"}, nil, nil},
		{"the agent's own", []string{"sh", "/tmp", "/dev/null", "/proc/self/status", "--t=/var/tmp"},
			[]string{"sh", "/tmp", "/dev/null", "/proc/self/status", "--t=/var/tmp"}, nil, nil},
		{"a socket", []string{"agent", sock}, []string{"agent", sock}, nil, nil},
		{"inside the home", []string{"node", inHome}, []string{"node", inHome}, []string{filepath.Join(home, ".local", "node_modules")}, protected},
		{"node_modules holding a protected path", []string{"node", homeNM}, []string{"node", homeNM}, []string{homeNM}, []string{protectedInNM}},
		{"twice", []string{"sh", script, script}, []string{"sh", script, script}, []string{script}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, read, err := argGrants(tc.args, data, tc.protected)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(argv, tc.argv) || !slices.Equal(read, tc.read) {
				t.Errorf("argGrants(%q) = %q, %q; want %q, %q", tc.args, argv, read, tc.argv, tc.read)
			}
		})
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a directory holding the home", []string{"agent", "--root=" + root}, root + ", which contains " + data},
		{"the home itself", []string{"agent", home}, home + ", which contains " + home},
		{"a file in the data dir", []string{"agent", "--token=" + token}, token + ", which is in the data dir " + data},
		{"the data dir", []string{"agent", data}, data + ", which is in the data dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := argGrants(tc.args, data, protected)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("argGrants(%q): %v, want an error naming %q", tc.args, err, tc.want)
			}
		})
	}
}
