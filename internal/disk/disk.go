// Package disk measures and removes the trees agents write: how many
// bytes a sandbox's files take (Usage), how much room is left under the
// data dir (Free), and the removal of a sandbox's files whatever modes an
// agent left on them (RemoveAll). The coordinator's disk guard and the
// retention loop use it; nothing here knows what a sandbox is.
//
// Every function treats the tree as hostile: an agent may still be
// changing it (swapping a directory for a symbolic link between two
// calls), so nothing here ever follows a link out of the tree it was
// given.
package disk

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// maxDepth bounds how deep Usage descends: each level holds one open
// directory. Real trees (node_modules included) stay under a hundred
// levels; a deeper one is an agent's trick, reported as an error.
const maxDepth = 512

// ErrTooDeep is reported by Usage for a tree deeper than it descends.
var ErrTooDeep = errors.New("directories nested deeper than the walk descends")

// RemoveAll removes dir and everything under it, as os.RemoveAll does,
// also where an agent left directories without write or search permission
// for their owner (as `go mod download` leaves its module cache, 0555):
// those are given their owner's rights back first. Only owner bits are
// added, and only to directories inside dir, reached through an os.Root,
// so no link, swapped in or not, leads a chmod out of the tree. A dir that
// does not exist is no error.
func RemoveAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if err := ownerRights(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// ownerRights adds u+rwx to every directory of the tree at dir that lacks
// them, dir included, before the walk reads it.
func ownerRights(dir string) error {
	parent, err := os.OpenRoot(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := fixDir(parent, filepath.Base(dir)); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var first error
	// WalkDir calls the function for a directory before it reads it, so
	// a directory is made readable before the walk needs to.
	walkErr := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable even so: the removal that follows says what is left.
			if first == nil {
				first = err
			}
			return nil
		}
		if p == "." || !d.IsDir() {
			return nil
		}
		if err := fixDir(root, p); err != nil && first == nil {
			first = err
		}
		return nil
	})
	return errors.Join(walkErr, first)
}

// fixDir gives the directory name of r its owner's rights if it lacks
// them; a name that is not a directory (any more) is left alone.
func fixDir(r *os.Root, name string) error {
	fi, err := r.Lstat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o700 == 0o700 {
		return nil
	}
	return r.Chmod(name, fi.Mode().Perm()|0o700)
}
