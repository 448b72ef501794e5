package workspace

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// entryOf describes fi, found at p.
func entryOf(p string, fi fs.FileInfo) sandbox.FileEntry {
	e := sandbox.FileEntry{Path: p, Size: fi.Size(), ModifiedAt: fi.ModTime().UTC()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = sandbox.EntryFile
		e.ETag = etagOf(fi)
	case m.IsDir():
		e.Type, e.Size = sandbox.EntryDir, 0
	case m&fs.ModeSymlink != 0:
		e.Type = sandbox.EntrySymlink
	default:
		e.Type, e.Size = sandbox.EntryOther, 0
	}
	return e
}

// etagOf is a file's strong ETag: a hash of its device, inode, size,
// modification and change times (nanoseconds). It costs one stat where a
// content hash would read the whole file on every GET and every
// If-Match, and it changes on every write: an atomic write makes a new
// inode; a write in place moves the mtime; and the ctime, which nobody
// can set back, moves with any change, so a tool that restores an mtime
// does not hide one. It may change without the content changing (chmod),
// which only costs a client a fresh read. The hash keeps inode numbers
// to the server.
func etagOf(fi fs.FileInfo) string {
	var b [48]byte
	binary.BigEndian.PutUint64(b[16:], uint64(fi.Size()))
	binary.BigEndian.PutUint64(b[24:], uint64(fi.ModTime().UnixNano()))
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		binary.BigEndian.PutUint64(b[0:], uint64(st.Dev))
		binary.BigEndian.PutUint64(b[8:], st.Ino)
		sec, nsec := ctime(st)
		binary.BigEndian.PutUint64(b[32:], uint64(sec))
		binary.BigEndian.PutUint64(b[40:], uint64(nsec))
	}
	sum := sha256.Sum256(b[:])
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// Stat describes the entry at p without following a final symbolic link.
func (w *Workspace) Stat(p string) (sandbox.FileEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return sandbox.FileEntry{}, fail("stat", p, err)
	}
	return entryOf(rel, fi), nil
}

// List returns a page of the entries of directory dir sorted by path:
// at most limit (1..sandbox.MaxFileList) of those whose path sorts
// after after (a path of the previous page's last entry, or ""), and
// whether more follow.
func (w *Workspace) List(dir string, limit int, after string) ([]sandbox.FileEntry, bool, error) {
	rel, err := clean(dir)
	if err != nil {
		return nil, false, err
	}
	if limit < 1 || limit > sandbox.MaxFileList {
		return nil, false, sandbox.Errorf(sandbox.EInvalidRequest, "limit %d is out of range 1..%d", limit, sandbox.MaxFileList)
	}
	f, err := w.root.Open(rel)
	if err != nil {
		return nil, false, fail("list", dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fail("list", dir, err)
	}
	if !fi.IsDir() {
		return nil, false, sandbox.Errorf(sandbox.EInvalidRequest, "%q is not a directory", dir)
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, false, fail("list", dir, err)
	}
	paths := make([]string, 0, len(names))
	for _, n := range names {
		if p := path.Join(rel, n); p > after {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	more := len(paths) > limit
	if more {
		paths = paths[:limit]
	}
	out := make([]sandbox.FileEntry, 0, len(paths))
	for _, p := range paths {
		// Through the root: the names came from a directory that may
		// have been swapped since, and File.ReadDir's Info would stat
		// them by path.
		fi, err := w.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, false, fail("list", p, err)
		}
		out = append(out, entryOf(p, fi))
	}
	return out, more, nil
}

// ReadFile opens the file at p (following symbolic links that stay in
// the workspace). Its FileEntry describes the file opened, so the ETag
// belongs to the bytes served even if the path is replaced meanwhile.
func (w *Workspace) ReadFile(p string) (*sandbox.File, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO an agent left would block until a writer came.
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fail("read", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fail("read", p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if fi.IsDir() {
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "%q is a directory", p)
		}
		return nil, sandbox.Errorf(sandbox.EInvalidRequest, "%q is not a regular file", p)
	}
	ct := mime.TypeByExtension(path.Ext(rel))
	if ct == "" {
		ct = "application/octet-stream"
	}
	return &sandbox.File{ReadSeekCloser: f, FileEntry: entryOf(rel, fi), ContentType: ct}, nil
}

// WriteFile writes the file at p from r, atomically: the bytes go to a
// temporary file in the same directory, renamed over p once all are
// there, so a reader (the agent included) sees the old file or the new
// one, never a part. Missing parents are made. It reports the new entry
// and whether the file was created rather than replaced. Readers beyond
// Limits.FileMax bytes are refused with payload_too_large, nothing
// written.
//
// If-Match is checked before the bytes are taken and again just before
// the rename: POSIX has no compare-and-rename, so a change that lands
// between the second check and the rename goes unseen; that window is a
// few system calls.
func (w *Workspace) WriteFile(p string, r io.Reader, o sandbox.WriteFileOptions) (sandbox.FileEntry, bool, error) {
	rel, err := clean(p)
	if err != nil {
		return sandbox.FileEntry{}, false, err
	}
	if rel == "." {
		return sandbox.FileEntry{}, false, sandbox.Errorf(sandbox.EInvalidRequest, "the workspace itself is a directory; name a file in it")
	}
	mode := o.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	dir := path.Dir(rel)
	if err := w.mkdirAll(w.root, dir, 0o755); err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	if _, err := w.checkMatch(p, rel, o.IfMatch); err != nil {
		return sandbox.FileEntry{}, false, err
	}
	tmp := path.Join(dir, tempName("write"))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	done := false
	defer func() {
		f.Close()
		if !done {
			_ = w.root.Remove(tmp)
		}
	}()
	limit := w.opts.Limits.FileMax
	n, err := io.Copy(w.roomWriter(f), io.LimitReader(r, limit+1))
	if se := (*sandbox.Error)(nil); errors.As(err, &se) {
		return sandbox.FileEntry{}, false, err
	}
	if err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	if n > limit {
		return sandbox.FileEntry{}, false, tooLarge("the file", limit, FlagFileMax)
	}
	if err := w.checkRoom(); err != nil {
		return sandbox.FileEntry{}, false, err
	}
	if err := f.Chmod(mode); err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	if o := w.opts.Owner; o != nil {
		if err := f.Chown(o.UID, o.GID); err != nil {
			return sandbox.FileEntry{}, false, fail("write", p, err)
		}
	}
	existed, err := w.checkMatch(p, rel, o.IfMatch)
	if err != nil {
		return sandbox.FileEntry{}, false, err
	}
	if err := w.root.Rename(tmp, rel); err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	done = true
	// Stat after the rename: it moves the change time, part of the ETag.
	fi, err := f.Stat()
	if err != nil {
		return sandbox.FileEntry{}, false, fail("write", p, err)
	}
	return entryOf(rel, fi), !existed, nil
}

// checkMatch reports whether something is at rel, and refuses a write
// that would replace a directory or whose If-Match does not hold.
func (w *Workspace) checkMatch(p, rel, ifMatch string) (bool, error) {
	fi, err := w.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		if ifMatch != "" {
			return false, sandbox.Errorf(sandbox.EPreconditionFailed, "If-Match %s: %q does not exist", ifMatch, p)
		}
		return false, nil
	}
	if err != nil {
		return false, fail("write", p, err)
	}
	if fi.IsDir() {
		return true, sandbox.Errorf(sandbox.EInvalidRequest, "cannot write %q: it is a directory", p)
	}
	if ifMatch == "" || ifMatch == "*" {
		return true, nil
	}
	if !fi.Mode().IsRegular() || !matches(ifMatch, etagOf(fi)) {
		return true, sandbox.Errorf(sandbox.EPreconditionFailed, "%q changed: its ETag is no longer %s; read it again", p, ifMatch)
	}
	return true, nil
}

// matches reports whether an If-Match header names etag (strong
// comparison: a weak tag never matches).
func matches(header, etag string) bool {
	for t := range strings.SplitSeq(header, ",") {
		if strings.TrimSpace(t) == etag {
			return true
		}
	}
	return false
}

// Remove removes the file, link or empty directory at p; with recursive,
// a directory and everything in it, also directories an agent left
// without write or search permission (given their owner's rights back
// first, as disk.RemoveAll does, but through the workspace's root: the
// path is a client's and may cross a link). A directory that is not
// empty, without recursive, is a conflict. The workspace itself is not
// removed.
func (w *Workspace) Remove(p string, recursive bool) error {
	rel, err := clean(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return sandbox.Errorf(sandbox.EInvalidRequest, "the workspace itself cannot be removed; remove what is in it")
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return fail("remove", p, err)
	}
	if !fi.IsDir() || !recursive {
		if err := w.root.Remove(rel); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
				return sandbox.Errorf(sandbox.EConflict, "directory %q is not empty; remove it with recursive=true", p)
			}
			return fail("remove", p, err)
		}
		return nil
	}
	err = w.root.RemoveAll(rel)
	if errors.Is(err, fs.ErrPermission) {
		if err := w.ownerRights(rel); err != nil {
			return fail("remove", p, err)
		}
		err = w.root.RemoveAll(rel)
	}
	if err != nil {
		return fail("remove", p, err)
	}
	return nil
}

// ownerRights adds u+rwx to every directory of the tree at dir that lacks
// them, before the walk reads it.
func (w *Workspace) ownerRights(dir string) error {
	fix := func(p string) error {
		fi, err := w.root.Lstat(p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o700 == 0o700 {
			return nil
		}
		return w.root.Chmod(p, fi.Mode().Perm()|0o700)
	}
	if err := fix(dir); err != nil {
		return err
	}
	var first error
	walkErr := fs.WalkDir(w.root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if first == nil {
				first = err
			}
			return nil
		}
		if p != dir && d.IsDir() {
			if err := fix(p); err != nil && first == nil {
				first = err
			}
		}
		return nil
	})
	return errors.Join(walkErr, first)
}
