package workspace

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Unpack unpacks a tar or a tar.gz (told apart by gzip's magic bytes)
// from r into the directory dir of the workspace, made if missing.
// Existing files the archive names are replaced; others stay.
//
// Refused, naming the first bad entry, and with nothing of the archive
// left behind: names that are absolute or climb out with "..", symbolic
// links whose target is absolute or leads out of the workspace, hard
// links to anything not in the archive, devices, FIFOs and other types,
// setuid and setgid bits, an entry that would land through a link, and
// the limits: Limits.FileMax for one file, Limits.ArchiveMax for all of
// them, Limits.ArchiveEntries entries (payload_too_large naming the
// flag).
//
// How nothing is left behind: the archive is unpacked into a staging
// directory made in the workspace itself (hidden, ".sparkles-unpack-…";
// in the workspace so that moving it in is a rename on one file system,
// and through an os.Root opened on it, so no entry lands outside it
// whatever links earlier entries made). Only once every entry is in and
// checked is the staging tree moved in: each top-level name renamed over
// its place, merged into directories that exist. A refused archive
// touches nothing but the staging directory, which is removed. The move
// itself is not one step: an agent changing the target at the same
// moment (putting a file where the archive has a directory) can make it
// fail part way; what moved stays and the error says so. A server that
// dies during an unpack leaves its hidden staging directory behind; the
// sandbox's removal takes it with the rest (a sweep at boot is for the
// caller that knows no unpack runs).
func (w *Workspace) Unpack(r io.Reader, dir string) (sandbox.ArchiveSummary, error) {
	rel, err := clean(dir)
	if err != nil {
		return sandbox.ArchiveSummary{}, err
	}
	// The target is checked before the body is read, so a bad one is
	// refused at once; it is made only once the archive has passed.
	if fi, err := w.root.Stat(rel); err == nil && !fi.IsDir() {
		return sandbox.ArchiveSummary{}, sandbox.Errorf(sandbox.EInvalidRequest, "%q is not a directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return sandbox.ArchiveSummary{}, fail("unpack into", dir, err)
	}
	stage := tempName("unpack")
	if err := w.root.Mkdir(stage, 0o700); err != nil {
		return sandbox.ArchiveSummary{}, fail("unpack into", dir, err)
	}
	defer func() {
		if err := w.root.RemoveAll(stage); err != nil {
			w.log.Warn("remove an unpack's staging directory", "dir", stage, "err", err)
		}
	}()
	sroot, err := w.root.OpenRoot(stage)
	if err != nil {
		return sandbox.ArchiveSummary{}, fail("unpack into", dir, err)
	}
	defer sroot.Close()
	u := unpacker{w: w, r: sroot, base: rel, room: w.roomWriter(nil)}
	if err := u.read(r); err != nil {
		return u.sum, err
	}
	if err := w.checkRoom(); err != nil {
		return u.sum, err
	}
	if err := w.mkdirAll(w.root, rel, 0o755); err != nil {
		return u.sum, fail("unpack into", dir, err)
	}
	if err := w.merge(stage, rel, true); err != nil {
		return u.sum, err
	}
	if err := w.merge(stage, rel, false); err != nil {
		w.log.Warn("an unpack stopped part way", "dir", rel, "err", err)
		return u.sum, sandbox.Errorf(sandbox.EConflict, "the unpack into %q stopped part way: the workspace changed while it moved in", dir)
	}
	return u.sum, nil
}

type unpacker struct {
	w    *Workspace
	r    *os.Root // the staging directory
	base string   // the target, relative to the workspace
	sum  sandbox.ArchiveSummary
	room *roomWriter
}

func (u *unpacker) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return sandbox.Errorf(sandbox.EInvalidRequest, "the body is not a gzip stream: %v", err)
		}
		defer zr.Close()
		in = zr
	}
	tr := tar.NewReader(in)
	lim := u.w.opts.Limits
	for {
		h, err := tr.Next()
		if err == io.EOF {
			if u.sum.Entries == 0 {
				return sandbox.Errorf(sandbox.EInvalidRequest, "the archive is empty")
			}
			return nil
		}
		if err != nil {
			if u.sum.Entries == 0 {
				return sandbox.Errorf(sandbox.EInvalidRequest, "the body is not a tar or tar.gz archive: %v", err)
			}
			return sandbox.Errorf(sandbox.EInvalidRequest, "the archive is damaged after %d entries: %v", u.sum.Entries, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // metadata of the archive, not an entry
		}
		u.sum.Entries++
		if u.sum.Entries > lim.ArchiveEntries {
			return sandbox.Errorf(sandbox.EPayloadTooLarge, "the archive has more than %d entries, the limit (%s)", lim.ArchiveEntries, FlagArchiveEntries)
		}
		if err := u.entry(tr, h); err != nil {
			return err
		}
	}
}

// refuse is the error of a bad entry.
func refuse(name, format string, args ...any) error {
	return sandbox.Errorf(sandbox.EInvalidRequest, "archive entry %q refused: %s; nothing was unpacked", name, fmt.Sprintf(format, args...))
}

func (u *unpacker) entry(tr *tar.Reader, h *tar.Header) error {
	name := strings.TrimPrefix(h.Name, "./")
	if name == "" {
		name = "."
	}
	if strings.HasPrefix(name, "/") {
		return refuse(h.Name, "the name is absolute")
	}
	if strings.ContainsRune(name, 0) || !localPath(name) {
		return refuse(h.Name, "the name leads outside the directory")
	}
	name = path.Clean(name)
	if name == "." {
		return nil // the archive's own top directory
	}
	if h.Mode&(0o4000|0o2000) != 0 {
		return refuse(h.Name, "setuid and setgid bits are not taken")
	}
	perm := fs.FileMode(h.Mode).Perm()
	lim := u.w.opts.Limits
	if err := u.throughLink(name); err != nil {
		return refuse(h.Name, "%v", err)
	}
	if err := u.w.mkdirAll(u.r, path.Dir(name), 0o755); err != nil {
		return u.placeErr(h.Name, err)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := u.w.mkdirAll(u.r, name, perm|0o700); err != nil {
			return u.placeErr(h.Name, err)
		}
		return nil
	case tar.TypeReg, tar.TypeRegA:
		if h.Size > lim.FileMax {
			return tooLarge(fmt.Sprintf("archive entry %q (%d bytes)", h.Name, h.Size), lim.FileMax, FlagFileMax)
		}
		if u.sum.Bytes+h.Size > lim.ArchiveMax {
			return tooLarge(fmt.Sprintf("the archive's unpacked size (%d bytes by entry %q)", u.sum.Bytes+h.Size, h.Name), lim.ArchiveMax, FlagArchiveMax)
		}
		u.replace(name)
		f, err := u.r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return u.placeErr(h.Name, err)
		}
		u.room.w = f // the count goes on across files
		_, err = io.Copy(u.room, tr)
		if err == nil {
			err = u.owned(f)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			var se *sandbox.Error
			if errors.As(err, &se) {
				return err
			}
			return sandbox.Errorf(sandbox.EInvalidRequest, "archive entry %q: %v", h.Name, err)
		}
		u.sum.Bytes += h.Size
		return nil
	case tar.TypeSymlink:
		t := h.Linkname
		if t == "" || strings.HasPrefix(t, "/") {
			return refuse(h.Name, "the link's target %q is absolute", t)
		}
		// Where the link will resolve: from its directory in the target.
		if !localPath(path.Join(u.base, path.Dir(name), t)) {
			return refuse(h.Name, "the link's target %q leads outside the workspace", t)
		}
		u.replace(name)
		if err := u.r.Symlink(t, name); err != nil {
			return u.placeErr(h.Name, err)
		}
		return u.lchown(h.Name, name)
	case tar.TypeLink:
		t := strings.TrimPrefix(h.Linkname, "./")
		if strings.HasPrefix(t, "/") || !localPath(t) {
			return refuse(h.Name, "the hard link's target %q is outside the archive", h.Linkname)
		}
		// Only to a file already unpacked: the staging root keeps the
		// lookup inside what this archive made.
		fi, err := u.r.Lstat(path.Clean(t))
		if err != nil || !fi.Mode().IsRegular() {
			return refuse(h.Name, "the hard link's target %q is not a file earlier in the archive", h.Linkname)
		}
		u.replace(name)
		if err := u.r.Link(path.Clean(t), name); err != nil {
			return u.placeErr(h.Name, err)
		}
		return nil
	case tar.TypeChar, tar.TypeBlock:
		return refuse(h.Name, "devices are not taken")
	case tar.TypeFifo:
		return refuse(h.Name, "FIFOs are not taken")
	}
	return refuse(h.Name, "entries of type %q are not taken", string(h.Typeflag))
}

// throughLink refuses a name whose directories include a symbolic link
// an earlier entry made: the checks on names and link targets are
// lexical, and hold only if every name is where it reads.
func (u *unpacker) throughLink(name string) error {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		fi, err := u.r.Lstat(d)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("it would land through the symbolic link %q", d)
		}
	}
	return nil
}

// replace clears the way for an entry that names what an earlier entry
// of the same archive made: the last one wins, as with tar. A directory
// with content stays, and the new entry's creation says why.
func (u *unpacker) replace(name string) { _ = u.r.Remove(name) }

// placeErr explains an entry that could not be made in the staging tree:
// an escape there is an entry going through a link of the archive.
func (u *unpacker) placeErr(name string, err error) error {
	switch {
	case escapes(err):
		return refuse(name, "it would land through a symbolic link")
	case errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrNotExist):
		return refuse(name, "it conflicts with an earlier entry")
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return refuse(name, "%v", pe.Err)
	}
	return fmt.Errorf("unpack %q: %w", name, err)
}

func (u *unpacker) owned(f *os.File) error {
	if o := u.w.opts.Owner; o != nil {
		return f.Chown(o.UID, o.GID)
	}
	return nil
}

func (u *unpacker) lchown(entry, name string) error {
	if err := u.w.chown(u.r, name); err != nil {
		return fmt.Errorf("unpack %q: %w", entry, err)
	}
	return nil
}

// merge moves the staging tree src into dst, both relative to the
// workspace: each name renamed over its place, directories merged into
// directories that exist. With check it moves nothing and only reports
// the first name that cannot go (a file or link of the archive where the
// workspace has a directory, or the reverse), so a conflict refuses the
// whole archive before anything of it moved.
func (w *Workspace) merge(src, dst string, check bool) error {
	f, err := w.root.Open(src)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		s, d := path.Join(src, n), path.Join(dst, n)
		sfi, err := w.root.Lstat(s)
		if err != nil {
			return err
		}
		dfi, err := w.root.Lstat(d)
		switch {
		case check && sfi.Mode()&fs.ModeSymlink != 0 && !w.linkStays(s, d):
			return sandbox.Errorf(sandbox.EInvalidRequest, "archive entry %q refused: a symbolic link leading outside the workspace; nothing was unpacked", d)
		case errors.Is(err, fs.ErrNotExist):
			if !check {
				if err := w.root.Rename(s, d); err != nil {
					return fail("unpack into", d, err)
				}
			}
			continue
		case err != nil:
			return fail("unpack into", d, err)
		case sfi.IsDir() && dfi.IsDir():
			if err := w.merge(s, d, check); err != nil {
				return err
			}
			continue
		case sfi.IsDir() != dfi.IsDir():
			return sandbox.Errorf(sandbox.EConflict, "the archive and the workspace disagree on %q: "+
				"a directory in one, not in the other; nothing was unpacked", d)
		}
		if check {
			continue
		}
		// A file or link over a file or link: rename replaces it.
		if err := w.root.Rename(s, d); err != nil {
			return fail("unpack into", d, err)
		}
	}
	return nil
}

// linkStays reports whether the link at s of the staging tree, once at
// d, resolves (lexically) inside the workspace. The entries were checked
// as they came; this checks them where they are, whatever made them.
func (w *Workspace) linkStays(s, d string) bool {
	t, err := w.root.Readlink(s)
	return err == nil && !strings.HasPrefix(t, "/") && localPath(path.Join(path.Dir(d), t))
}
