//go:build !unix

package boltstore

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked by another process")

// tryLock takes no lock where flock does not exist: bbolt locks the file
// in its own way when it opens it, after the store has checked it.
func tryLock(*os.File, bool) error { return nil }
