package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// kernelDirs hold the agent's own /proc, /dev and /sys, and the host's
// daemons' sockets (/run): a path there that the command line names is
// never given by implication, whatever it is.
var kernelDirs = []string{"/proc", "/dev", "/sys", "/run"}

// ownDirs are what the agent has a fresh one of: a directory argument that
// is one, or holds one, would lay the host's over it.
var ownDirs = []string{"/tmp", "/var/tmp", "/run", "/dev", "/proc", "/sys"}

// argGrants returns what an agent must read of the paths its command line
// names beyond the command (args[0], which installPaths covers): `node
// /srv/agents/dist/index.js` runs a script that the install of node does
// not hold. Every argument that is an absolute path, or holds one after
// its first '=' (--config=/etc/x.toml), and names an existing regular
// file or directory outside the system, is given as the command is: the
// outermost node_modules it lives in (a package requires its neighbours),
// else itself, and a script's #! interpreter. Anything else on the command
// line is left as it is: a relative path, a path that does not exist, a
// socket or device. argv is args with every path given spelled as it
// resolves, as the command itself is run: a symlink on the way is not in
// the agent's view. A path in the data dir, or a directory that holds a
// protected path, is refused: the agent would not start anyway, and the
// error names the argument.
func argGrants(args []string, data string, protected []string) (argv, read []string, err error) {
	argv = slices.Clone(args)
	for i, a := range args {
		if i == 0 {
			continue
		}
		for _, c := range argCandidates(a) {
			real, given, err := argGrant(c.path, data, protected)
			if err != nil {
				return nil, nil, err
			}
			if real == "" {
				continue
			}
			if len(given) > 0 {
				argv[i] = c.prefix + real
			}
			for _, g := range given {
				if !slices.Contains(read, g) {
					read = append(read, g)
				}
			}
			break
		}
	}
	return argv, read, nil
}

type argCandidate struct{ prefix, path string }

// argCandidates are the readings of an argument as a path: the whole of
// it, then what follows its first '='; the first that exists is taken.
func argCandidates(a string) []argCandidate {
	var out []argCandidate
	if filepath.IsAbs(a) {
		out = append(out, argCandidate{"", a})
	}
	if k, v, ok := strings.Cut(a, "="); ok && filepath.IsAbs(v) {
		out = append(out, argCandidate{k + "=", v})
	}
	return out
}

// argGrant resolves one path of the command line: real is "" when it
// names nothing the server sees (nothing is given then, and the next
// reading is tried), given is empty when the agent reads it already or
// may not be given it by implication.
func argGrant(p, data string, protected []string) (real string, given []string, err error) {
	real, err = filepath.EvalSymlinks(p)
	if err != nil {
		return "", nil, nil
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, nil
	}
	if data != "" && within(real, data) {
		return "", nil, fmt.Errorf("the agent's command line names %s, which is in the data dir %s: agents never reach it", p, data)
	}
	switch {
	case inSystem(real):
		return real, nil, nil
	case slices.ContainsFunc(kernelDirs, func(d string) bool { return within(real, d) }):
		return real, nil, nil
	case fi.Mode().IsRegular():
		return real, installPaths(real, protected), nil
	case !fi.IsDir():
		return real, nil, nil // a socket, a fifo, a device: never by implication
	}
	for _, pr := range protected {
		if pr != "" && within(pr, real) {
			return "", nil, fmt.Errorf("the agent's command line names %s, which contains %s, which agents must not reach: name a directory inside it instead", p, pr)
		}
	}
	if slices.ContainsFunc(ownDirs, func(d string) bool { return within(d, real) }) {
		return real, nil, nil
	}
	if nm := outermost(real, "node_modules"); nm != "" {
		return real, []string{safeDir(nm, real, protected)}, nil
	}
	return real, []string{real}, nil
}
