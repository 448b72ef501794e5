package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/sys/unix"
)

// maxDepth bounds how deep a scan descends: each level holds one open
// directory. A deeper tree is an agent's trick, reported as an error.
const maxDepth = 512

// racyWindow is how old a file's mtime must be, when it is hashed, for
// its hash to be trusted on stat alone later. Kernels stamp files from a
// coarse clock (ticks of several milliseconds, a second on some file
// systems), so a file written just after it was hashed can keep the very
// mtime recorded: git's "racily clean" entries. Such files are hashed
// again at the next snapshot.
const racyWindow = 2 * time.Second

// gitDir is never recorded nor written, at any depth: the workspace's own
// repository (and any nested one) is the user's, and git refuses the name
// in a tree anyway.
const gitDir = ".git"

// scan walks the workspace and writes its tree, answering the root tree's
// hash. Every file is reached relative to an open directory with
// O_NOFOLLOW, so an agent swapping a directory for a link while the scan
// runs cannot make it read outside the workspace; FIFOs are opened with
// O_NONBLOCK and skipped, so none can stall it.
func (s *Store) scan(ctx context.Context) (plumbing.Hash, manifest, error) {
	fd, err := unix.Open(s.work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return plumbing.ZeroHash, manifest{}, fmt.Errorf("open workspace: %w", &os.PathError{Op: "open", Path: s.work, Err: err})
	}
	if s.cache == nil {
		// Loaded by the first scan only: a store opened for a diff or a
		// change list has no use for it.
		s.cache = loadStatCache(filepath.Join(s.dir, statCacheFile))
	}
	sc := &scanner{s: s, ctx: ctx, trustBefore: s.opts.Now().Add(-racyWindow).UnixNano(), next: make(map[string]cacheEntry, len(s.cache.Entries))}
	h, _, err := sc.dir(fd, "", 0)
	if err != nil {
		return plumbing.ZeroHash, manifest{}, err
	}
	if h.IsZero() {
		h, err = s.writeTree(nil)
		if err != nil {
			return plumbing.ZeroHash, manifest{}, err
		}
	}
	if sc.dirty || len(sc.next) != len(s.cache.Entries) {
		s.cache.Entries = sc.next
		s.cache.save()
	}
	return h, sc.m, nil
}

type scanner struct {
	s           *Store
	ctx         context.Context
	trustBefore int64
	next        map[string]cacheEntry
	dirty       bool
	m           manifest
}

// dir records the directory open as fd (and closes it); an empty
// directory answers the zero hash, since trees hold no empty directory.
func (sc *scanner) dir(fd int, rel string, depth int) (plumbing.Hash, bool, error) {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if depth > maxDepth {
		return plumbing.ZeroHash, false, fmt.Errorf("workspace directories nested deeper than %d under %q", maxDepth, rel)
	}
	if err := sc.ctx.Err(); err != nil {
		return plumbing.ZeroHash, false, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("read workspace directory %q: %w", rel, err)
	}
	entries := make([]object.TreeEntry, 0, len(names))
	for _, name := range names {
		if name == gitDir {
			continue
		}
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed while we looked: the next snapshot sees it
		}
		var e object.TreeEntry
		var ok bool
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.EACCES) {
				sc.m.Unstored = append(sc.m.Unstored, unstored{Path: p + "/", Reason: "unreadable directory"})
				continue
			}
			if err != nil {
				continue
			}
			h, _, err := sc.dir(sub, p, depth+1)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			e, ok = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}, !h.IsZero()
		case unix.S_IFREG:
			e, ok, err = sc.file(fd, name, p, &st)
		case unix.S_IFLNK:
			e, ok, err = sc.symlink(fd, name, p)
		default:
			continue // sockets, FIFOs, devices: git records none either
		}
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if ok {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, false, nil
	}
	h, err := sc.s.writeTree(entries)
	return h, true, err
}

func fileMode(st *unix.Stat_t) filemode.FileMode {
	if st.Mode&0o100 != 0 {
		return filemode.Executable
	}
	return filemode.Regular
}

func (sc *scanner) file(dirfd int, name, p string, st *unix.Stat_t) (object.TreeEntry, bool, error) {
	key := statKey(st)
	if c, ok := sc.s.cache.Entries[p]; ok && c.Key == key && c.Trusted {
		sc.next[p] = c
		if c.Large {
			sc.m.Unstored = append(sc.m.Unstored, unstored{Path: p, Size: st.Size, Hash: c.Hash.String(), Reason: "larger than the limit"})
			return object.TreeEntry{}, false, nil
		}
		return object.TreeEntry{Name: name, Mode: fileMode(st), Hash: c.Hash}, true, nil
	}
	sc.dirty = true
	for attempt := 0; ; attempt++ {
		h, size, large, err := sc.s.storeFile(dirfd, name)
		if errors.Is(err, unix.EACCES) {
			sc.m.Unstored = append(sc.m.Unstored, unstored{Path: p, Size: st.Size, Reason: "unreadable"})
			return object.TreeEntry{}, false, nil
		}
		if errors.Is(err, errChanged) && attempt < 3 {
			continue
		}
		if errors.Is(err, errChanged) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) || errors.Is(err, errNotRegular) {
			return object.TreeEntry{}, false, nil // still being changed: the next snapshot sees it
		}
		if err != nil {
			return object.TreeEntry{}, false, fmt.Errorf("snapshot %q: %w", p, err)
		}
		c := cacheEntry{Key: key, Hash: h, Large: large, Trusted: key.Mtime < sc.trustBefore}
		if size != key.Size {
			c.Trusted = false // it changed between the stat and the read
		}
		sc.next[p] = c
		if large {
			sc.m.Unstored = append(sc.m.Unstored, unstored{Path: p, Size: size, Hash: h.String(), Reason: "larger than the limit"})
			return object.TreeEntry{}, false, nil
		}
		return object.TreeEntry{Name: name, Mode: fileMode(st), Hash: h}, true, nil
	}
}

var (
	errChanged    = errors.New("file changed while it was read")
	errNotRegular = errors.New("not a regular file")
)

// storeFile hashes the file and writes its blob unless the store has it:
// reading twice costs less than compressing and writing every unchanged
// file a cold cache meets.
func (s *Store) storeFile(dirfd int, name string) (plumbing.Hash, int64, bool, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	if !fi.Mode().IsRegular() {
		return plumbing.ZeroHash, 0, false, errNotRegular
	}
	size := fi.Size()
	hasher := plumbing.NewHasher(plumbing.BlobObject, size)
	if err := copyExactly(hasher, f, size); err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	h := hasher.Sum()
	if size > s.opts.MaxFileSize {
		return h, size, true, nil
	}
	if s.st.HasEncodedObject(h) == nil {
		return h, size, false, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	w, header, err := s.st.LazyWriter()
	if err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	err = header(plumbing.BlobObject, size)
	if err == nil {
		err = copyExactly(w, f, size)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return plumbing.ZeroHash, 0, false, err
	}
	if hw, ok := w.(interface{ Hash() plumbing.Hash }); ok && hw.Hash() != h {
		return plumbing.ZeroHash, 0, false, errChanged
	}
	return h, size, false, nil
}

// copyExactly copies size bytes and checks the source holds no more.
func copyExactly(w io.Writer, r io.Reader, size int64) error {
	if _, err := io.CopyN(w, r, size); errors.Is(err, io.EOF) {
		return errChanged
	} else if err != nil {
		return err
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n != 0 {
		return errChanged
	}
	return nil
}

func (sc *scanner) symlink(dirfd int, name, p string) (object.TreeEntry, bool, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return object.TreeEntry{}, false, nil // replaced while we looked
	}
	h, err := sc.s.writeBlob(buf[:n])
	if err != nil {
		return object.TreeEntry{}, false, fmt.Errorf("snapshot %q: %w", p, err)
	}
	return object.TreeEntry{Name: name, Mode: filemode.Symlink, Hash: h}, true, nil
}

func (s *Store) writeBlob(b []byte) (plumbing.Hash, error) {
	h := plumbing.ComputeHash(plumbing.BlobObject, b)
	if s.st.HasEncodedObject(h) == nil {
		return h, nil
	}
	o := s.st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	o.SetSize(int64(len(b)))
	w, err := o.Writer()
	if err != nil {
		return h, err
	}
	if _, err := w.Write(b); err != nil {
		return h, err
	}
	if err := w.Close(); err != nil {
		return h, err
	}
	_, err = s.st.SetEncodedObject(o)
	return h, err
}

// writeTree writes a tree object unless the store has it, as every
// unchanged directory's tree is at every snapshot.
func (s *Store) writeTree(entries []object.TreeEntry) (plumbing.Hash, error) {
	sort.Sort(object.TreeEntrySorter(entries))
	o := s.st.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(o); err != nil {
		return plumbing.ZeroHash, err
	}
	h := o.Hash()
	if s.st.HasEncodedObject(h) == nil {
		return h, nil
	}
	return s.st.SetEncodedObject(o)
}
