package e2e

import (
	"errors"
	"os"
	"path/filepath"
)

// moduleDir is the module's root directory, which TestMain finds once: the
// binary is built there, and the repository's files (docs/, web/, .ci/run,
// server/openapi.json) are read from there.
var moduleDir string

// findModuleDir walks up from the working directory, the package's own as
// go test runs it, to the directory that holds go.mod.
func findModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above it")
		}
		dir = parent
	}
}

// repoFile is the file of the repository at rel, a slash-separated path
// from the module's root.
func repoFile(rel string) string {
	return filepath.Join(moduleDir, filepath.FromSlash(rel))
}
