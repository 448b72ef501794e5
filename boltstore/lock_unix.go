//go:build unix

package boltstore

import (
	"errors"
	"os"
	"syscall"
)

// errLocked is tryLock's answer when another process holds the lock.
var errLocked = errors.New("locked by another process")

// tryLock takes the flock bbolt takes on the file, without waiting.
func tryLock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
