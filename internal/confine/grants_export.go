//go:build linux

package confine

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Grants returns what an agent started with argv may read beyond the
// system directories and its sandbox, as Start would give it: the install
// of its command and of the paths its command line names (argGrants),
// then the server-wide read paths. An agent's own registry read paths are
// not among them. The error is the refusal Start would meet, or the
// command not being found; agents check shows both to the operator.
func (l *Launcher) Grants(argv []string) ([]string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("the agent's command is empty")
	}
	path := argv[0]
	if !strings.ContainsRune(path, filepath.Separator) {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("%s is not found on the server's PATH", path)
		}
		path = p
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", path, unwrap(err))
	}
	read := installPaths(real, l.protect)
	_, args, err := argGrants(argv, l.data, l.protect)
	if err != nil {
		return nil, err
	}
	for _, p := range slices.Concat(args, l.opts.ReadPaths) {
		if !slices.Contains(read, p) {
			read = append(read, p)
		}
	}
	return read, nil
}

// CheckCommandLine is the refusal Start would meet for argv's paths (a
// path in the data dir, a directory holding a protected path), found
// before any agent starts: serve refuses such a registration at start,
// naming it, instead of failing each sandbox that uses it.
func (l *Launcher) CheckCommandLine(argv []string) error {
	_, _, err := argGrants(argv, l.data, l.protect)
	return err
}
