package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Usage returns the bytes the trees at dirs take on disk: the blocks
// allocated to every file, directory and link in them, as du counts them
// (a sparse file counts what it holds, a file with several links in the
// trees once). A dir that does not exist counts nothing.
//
// Each directory is opened relative to its parent with O_NOFOLLOW, and
// each entry examined with fstatat without following it, so a tree that
// changes during the walk (an agent swapping a directory for a link to /)
// never leads it out. What cannot be read (a directory without read
// permission for a server that is not root, one nested past maxDepth) is
// counted without its contents; the error says what, after the walk of
// everything else.
func Usage(dirs ...string) (int64, error) {
	w := walker{}
	for _, dir := range dirs {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, unix.ENOENT) {
				w.fail(dir, err)
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err == nil {
			w.total += st.Blocks * 512
		}
		w.dir(fd, dir, 1)
	}
	return w.total, w.err
}

// Free returns the bytes of the file system under path that the server
// may still write: the blocks available to an unprivileged user, so that
// the ext4 root reserve is never counted as room.
func Free(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := st.Frsize
	if bs == 0 {
		bs = st.Bsize
	}
	return int64(st.Bavail) * bs, nil
}

type walker struct {
	total int64
	links map[[2]uint64]struct{} // files with more than one link, counted once
	err   error                  // the first failure; the walk goes on
}

func (w *walker) fail(path string, err error) {
	if w.err == nil {
		w.err = &os.PathError{Op: "measure", Path: path, Err: err}
	}
}

// dir adds up the entries of the open directory fd, descending into its
// subdirectories, and closes fd.
func (w *walker) dir(fd int, path string, depth int) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			w.entry(fd, path, e.Name(), depth)
		}
		if err == io.EOF || (err == nil && len(ents) == 0) {
			return
		}
		if err != nil {
			w.fail(path, err)
			return
		}
	}
}

func (w *walker) entry(parent int, path, name string, depth int) {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) { // removed since the directory was read
			w.fail(filepath.Join(path, name), err)
		}
		return
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if st.Nlink > 1 && !isDir {
		if w.links == nil {
			w.links = map[[2]uint64]struct{}{}
		}
		id := [2]uint64{st.Dev, st.Ino}
		if _, ok := w.links[id]; ok {
			return
		}
		w.links[id] = struct{}{}
	}
	w.total += st.Blocks * 512
	if !isDir {
		return
	}
	if depth >= maxDepth {
		w.fail(filepath.Join(path, name), fmt.Errorf("%w (%d)", ErrTooDeep, maxDepth))
		return
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Gone, or swapped for a link or a file since fstatat: not ours to follow.
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
			w.fail(filepath.Join(path, name), err)
		}
		return
	}
	w.dir(fd, filepath.Join(path, name), depth+1)
}
