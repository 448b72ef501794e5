//go:build !linux

package disk

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Usage returns the apparent size of the regular files under dirs. Agents
// are confined on Linux alone; elsewhere this is a rough count by path.
func Usage(dirs ...string) (int64, error) {
	var total int64
	var first error
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				if first == nil && !errors.Is(err, fs.ErrNotExist) {
					first = err
				}
				return nil
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
				}
			}
			return nil
		})
	}
	return total, first
}

// ErrNoStatfs is Free's error where the free space cannot be asked for.
var ErrNoStatfs = errors.New("free space is only measured on Linux")

// Free is unsupported here: the reserve is checked on Linux alone.
func Free(string) (int64, error) { return 0, ErrNoStatfs }
