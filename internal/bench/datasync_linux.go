package bench

import (
	"os"
	"syscall"
)

// datasync is what bbolt calls after a commit on Linux: fdatasync.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
