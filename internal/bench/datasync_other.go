//go:build !linux

package bench

import "os"

// datasync is fsync where there is no fdatasync, as bbolt does there.
func datasync(f *os.File) error { return f.Sync() }
