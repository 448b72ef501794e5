package confine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// systemDirs are readable by every agent: what a shell, node and their
// libraries need. /proc and /sys are added by the launcher (its /proc is the
// namespace's own).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix/store"}

// within reports whether path is dir or below it; both are clean and absolute.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func inSystem(path string) bool {
	return slices.ContainsFunc(systemDirs, func(d string) bool { return within(path, d) })
}

// installPaths returns what an agent whose executable is path (already
// resolved: the launcher runs it by this real path) must read of
// its own install, beside the system: the outermost node_modules directory
// when the executable lives in one (node_modules/.bin/x links into a
// package that requires its neighbours), else the file itself, plus the
// install of the interpreter its #! line names, found on the server's PATH.
// Nothing returned contains a protected path (the data dir, the server
// user's home): where a directory would, only the file is given.
func installPaths(real string, protected []string) []string {
	var out []string
	add := func(p string) {
		if !inSystem(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if nm := outermost(real, "node_modules"); nm != "" {
		add(safeDir(nm, real, protected))
	} else {
		add(real)
	}
	interp, err := interpreter(real)
	if err != nil || interp == "" {
		return out // not a script: nothing more to read
	}
	ireal, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return out // the agent fails to start the way it would unconfined
	}
	if dir := filepath.Dir(ireal); filepath.Base(dir) == "bin" {
		// An interpreter's prefix (…/bin/node → …) holds its libraries.
		add(safeDir(filepath.Dir(dir), ireal, protected))
	} else {
		add(ireal)
	}
	return out
}

// safeDir is dir, unless dir contains a protected path: then file alone.
func safeDir(dir, file string, protected []string) string {
	for _, p := range protected {
		if p != "" && within(p, dir) {
			return file
		}
	}
	return dir
}

// outermost returns the highest directory named name on path, or "".
func outermost(path, name string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if p == name && i > 0 {
			return strings.Join(parts[:i+1], "/")
		}
	}
	return ""
}

// interpreter returns the program a script's #! line runs, resolved with
// the server's PATH when it goes through env; "" for a binary.
func interpreter(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 256).ReadSlice('\n')
	if !bytes.HasPrefix(line, []byte("#!")) {
		return "", nil
	}
	if err != nil && len(line) < 3 {
		return "", nil
	}
	fields := strings.Fields(string(line[2:]))
	if len(fields) == 0 {
		return "", nil
	}
	if filepath.Base(fields[0]) != "env" {
		return fields[0], nil
	}
	for _, f := range fields[1:] {
		if strings.HasPrefix(f, "-") || strings.Contains(f, "=") {
			continue // env's options (-S) and assignments
		}
		return exec.LookPath(f)
	}
	return "", nil
}

// OptionError is an Options field that cannot be used, as opposed to a
// machine that cannot confine.
type OptionError struct {
	Field string // "Network", "ReadPaths", "WritePaths", "MemoryMax"
	Msg   string
}

func (e *OptionError) Error() string { return e.Msg }

// cleanPaths makes operator paths absolute, real and existing, and refuses
// one that contains a protected path: a read path of the home would hand
// the agent the data dir.
func cleanPaths(field string, paths, protected []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, &OptionError{field, fmt.Sprintf("%q: want an absolute path", p)}
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, &OptionError{field, fmt.Sprintf("%q: %v", p, unwrap(err))}
		}
		for _, pr := range protected {
			if pr != "" && within(pr, real) {
				return nil, &OptionError{field, fmt.Sprintf("%q contains %s, which agents must not reach", p, pr)}
			}
		}
		out = append(out, real)
	}
	return out, nil
}

func unwrap(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
