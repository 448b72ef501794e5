// Package workspace serves a sandbox's files: their listing, reading,
// atomic writes, removal, and the whole tree streamed out as tar.gz or
// unpacked from a tar or tar.gz. It knows a directory, nothing of
// sandboxes, turns or HTTP. A *Workspace is the sandbox.Files the HTTP
// layer serves; the entries and summaries it answers with are sandbox's.
//
// Every path goes through one os.Root opened on the workspace directory:
// the kernel walk it does refuses "..", absolute paths and any symbolic
// link that leads out, at each step of each call, so an agent that swaps
// a directory for a link between a check and a use gains nothing. Paths
// are relative to the workspace, with forward slashes.
//
// Errors are *sandbox.Error values of docs/errors.md where they map:
// invalid_request (a bad path, a path leading out, a refused archive
// entry), not_found, forbidden (a mode the agent set), conflict (a directory that is not empty),
// precondition_failed (a stale If-Match), payload_too_large (a limit,
// named with its flag). Anything else is an internal error with detail.
//
// Disk limits (the 507 of --sandbox-disk-max and --disk-reserve) are not
// known here: Options.Room asks the caller (the coordinator's DiskRoom)
// before and during a write or an unpack, and its error refuses it; a
// write that meets a full disk here is answered unavailable.
//
// No hook, filter or program of the user's runs: everything is plain
// file system calls.
package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The flags the limits are set with; errors name them so whoever meets
// a limit knows what raises it.
const (
	FlagFileMax        = "--files-max-size"
	FlagArchiveMax     = "--archive-max-size"
	FlagArchiveEntries = "--archive-max-entries"
)

// Defaults of the limits, for a zero Limits field.
const (
	DefaultFileMax        = 1 << 30  // 1 GiB: one file, written or unpacked
	DefaultArchiveMax     = 10 << 30 // 10 GiB: an archive's unpacked bytes
	DefaultArchiveEntries = 1_000_000
)

// Owner is who the files the server makes in a workspace belong to: the
// agent's uid and gid, so the agent can change them afterwards.
type Owner struct{ UID, GID int }

// Limits bound what one write or one unpack may put in the workspace.
// Zero fields take the defaults.
type Limits struct {
	FileMax        int64 // bytes of one file
	ArchiveMax     int64 // unpacked bytes of one archive
	ArchiveEntries int   // entries of one archive
}

// Options configure a Workspace.
type Options struct {
	// Owner, when set, is given every file and directory made here.
	Owner  *Owner
	Limits Limits
	Log    *slog.Logger
	// Room, when set, is asked whether add more bytes fit the
	// workspace's disk limits: by Workspace.Room, and with add 0 after
	// every RoomEvery bytes a write or an unpack puts down and once it is
	// all down, before it is moved into place. Its error (the caller's,
	// such as insufficient_storage) refuses the write or the unpack, and
	// nothing of it is left. The bytes already down count.
	Room func(add int64) error
}

// RoomEvery is how many bytes a write or an unpack puts down between
// two questions to Options.Room.
const RoomEvery = 64 << 20

// Workspace is one sandbox's work directory. Its methods are safe for
// concurrent use; the agent may change the tree at the same time.
type Workspace struct {
	root *os.Root
	opts Options
	log  *slog.Logger
}

var _ sandbox.Files = (*Workspace)(nil)

// Open opens the workspace at dir, which must exist.
func Open(dir string, opts Options) (*Workspace, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	if opts.Limits.FileMax <= 0 {
		opts.Limits.FileMax = DefaultFileMax
	}
	if opts.Limits.ArchiveMax <= 0 {
		opts.Limits.ArchiveMax = DefaultArchiveMax
	}
	if opts.Limits.ArchiveEntries <= 0 {
		opts.Limits.ArchiveEntries = DefaultArchiveEntries
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Workspace{root: root, opts: opts, log: log}, nil
}

// Close releases the workspace's directory.
func (w *Workspace) Close() error { return w.root.Close() }

// Room answers whether add more bytes fit the workspace's disk limits
// (Options.Room), so that a body of known size is refused before it is
// read; nil without Options.Room.
func (w *Workspace) Room(add int64) error {
	if w.opts.Room == nil {
		return nil
	}
	return w.opts.Room(add)
}

// clean turns a path given by a client into one relative to the
// workspace: "" and "." are the workspace itself; an absolute path and
// ".." that climbs out are refused (the HTTP layer strips the one slash
// a URL puts before a path).
func clean(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", sandbox.Errorf(sandbox.EInvalidRequest, "path %q holds a NUL byte", p)
	case p == "":
		return ".", nil
	case strings.HasPrefix(p, "/"):
		return "", sandbox.Errorf(sandbox.EInvalidRequest, "path %q is absolute; paths are relative to the workspace", p)
	case !localPath(p):
		return "", sandbox.Errorf(sandbox.EInvalidRequest, "path %q leads outside the workspace", p)
	}
	return path.Clean(p), nil
}

// localPath reports whether the slash path p stays below its starting
// directory, lexically: no "..", not absolute.
func localPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	c := path.Clean(p)
	return c != ".." && !strings.HasPrefix(c, "../")
}

// fail maps an error of the file system on the workspace path p to the
// public vocabulary.
func fail(op, p string, err error) error {
	var se *sandbox.Error
	switch {
	case errors.As(err, &se):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return sandbox.Errorf(sandbox.ENotFound, "no file or directory %q in the workspace", p)
	case escapes(err):
		return sandbox.Errorf(sandbox.EInvalidRequest, "path %q leads outside the workspace", p)
	case errors.Is(err, syscall.ENOTDIR):
		return sandbox.Errorf(sandbox.EInvalidRequest, "cannot %s %q: a part of its path is not a directory", op, p)
	case errors.Is(err, syscall.EISDIR):
		return sandbox.Errorf(sandbox.EInvalidRequest, "cannot %s %q: it is a directory", op, p)
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return sandbox.Errorf(sandbox.EConflict, "cannot %s %q: the directory is not empty", op, p)
	case errors.Is(err, fs.ErrPermission):
		return sandbox.Errorf(sandbox.EForbidden, "cannot %s %q: permission denied by its mode", op, p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return sandbox.Errorf(sandbox.EInvalidRequest, "cannot %s %q: the name is too long", op, p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return sandbox.Errorf(sandbox.EUnavailable, "cannot %s %q: the disk is full", op, p)
	}
	return fmt.Errorf("workspace %s %q: %w", op, p, err)
}

// escapes reports whether os.Root refused a path for leaving the root
// (through "..", or a symbolic link). os.Root has no exported error for
// it; ELOOP is a link it would not follow.
func escapes(err error) bool {
	return errors.Is(err, syscall.ELOOP) || strings.Contains(err.Error(), "path escapes")
}

// chown gives name in r to the owner, without following a link.
func (w *Workspace) chown(r *os.Root, name string) error {
	if w.opts.Owner == nil {
		return nil
	}
	return r.Lchown(name, w.opts.Owner.UID, w.opts.Owner.GID)
}

// mkdirAll makes dir and its missing parents in r, each given to the
// owner (os.Root.MkdirAll does not say which it made).
func (w *Workspace) mkdirAll(r *os.Root, dir string, perm fs.FileMode) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := r.Mkdir(p, perm)
		if err == nil {
			if err := w.chown(r, p); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		fi, err := r.Stat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
		}
	}
	return nil
}

// tempName is a name for a file or directory the server makes and then
// renames or removes: hidden, and never one a client picked.
func tempName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return ".sparkles-" + prefix + "-" + hex.EncodeToString(b[:])
}

// tooLarge is the payload_too_large error of a limit.
// roomWriter asks Options.Room every RoomEvery bytes written through it.
type roomWriter struct {
	w     io.Writer
	room  func(add int64) error
	since int64
}

func (w *Workspace) roomWriter(dst io.Writer) *roomWriter {
	return &roomWriter{w: dst, room: w.opts.Room}
}

func (r *roomWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	r.since += int64(n)
	if err == nil && r.room != nil && r.since >= RoomEvery {
		r.since = 0
		err = r.room(0)
	}
	return n, err
}

// check asks Options.Room once the bytes are all down.
func (w *Workspace) checkRoom() error { return w.Room(0) }

func tooLarge(what string, limit int64, flag string) error {
	return sandbox.Errorf(sandbox.EPayloadTooLarge, "%s is over the limit of %s (%s)", what, bytesText(limit), flag)
}

// bytesText writes n in binary units, as the flags take them.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
