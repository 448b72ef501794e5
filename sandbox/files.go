package sandbox

import (
	"encoding/json"
	"io"
	"io/fs"
	"time"
)

// The workspace API (docs/workspace.md) in the domain's terms: the
// entries, files and archive summaries it answers with, and Files, what
// the HTTP layer asks of a sandbox's workspace. internal/workspace
// implements it on one os.Root.

// Files is a sandbox's workspace opened for one request. Paths are
// relative to the workspace, with forward slashes; "" and "." are the
// workspace itself. Errors are *Error where they are part of the
// contract: invalid_request (a bad path, one leading out, a refused
// archive entry), not_found, forbidden, conflict, precondition_failed,
// payload_too_large, insufficient_storage.
type Files interface {
	// Stat describes the entry at p without following a final symbolic
	// link.
	Stat(p string) (FileEntry, error)
	// List returns a page of directory dir sorted by path: at most limit
	// (1..MaxFileList) entries whose path sorts after after; more is true
	// when a next page exists.
	List(dir string, limit int, after string) (list []FileEntry, more bool, err error)
	// ReadFile opens the regular file at p; its FileEntry describes the
	// bytes served.
	ReadFile(p string) (*File, error)
	// WriteFile writes the file at p from r, atomically, and reports its
	// new entry and whether it was created rather than replaced.
	WriteFile(p string, r io.Reader, o WriteFileOptions) (e FileEntry, created bool, err error)
	// Remove removes the entry at p; a directory that is not empty only
	// when recursive.
	Remove(p string, recursive bool) error
	// Archive streams directory dir to out as a tar.gz.
	Archive(out io.Writer, dir string) (ArchiveSummary, error)
	// Unpack unpacks the tar stream r into directory dir, all or nothing.
	Unpack(r io.Reader, dir string) (ArchiveSummary, error)
	// Room answers whether add more bytes fit the sandbox's disk limits,
	// so that a body of known size is refused before it is read.
	Room(add int64) error
	// Close releases the workspace.
	Close() error
}

// Entry types of FileEntry.Type.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	// EntryOther is a socket, a device or a FIFO an agent made: listed,
	// never read, archived or written.
	EntryOther = "other"
)

// MaxFileList is the most entries one page of a listing holds.
const MaxFileList = 1000

// FileEntry is one entry of a workspace, as a listing shows it. A
// symbolic link is itself (lstat): its size is the length of its target.
type FileEntry struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	// ETag is a file's strong entity tag, quotes included; set for
	// files, answered in a header, never in a listing.
	ETag string `json:"-"`
}

// MarshalJSON writes modified_at as every time of the API is written
// (TimeFormat: UTC, milliseconds).
func (e FileEntry) MarshalJSON() ([]byte, error) {
	type entry FileEntry
	return json.Marshal(struct {
		entry
		ModifiedAt string `json:"modified_at"`
	}{entry(e), FormatTime(e.ModifiedAt)})
}

// File is a file of a workspace open for reading, for http.ServeContent
// with its ETag and ContentType.
type File struct {
	io.ReadSeekCloser
	FileEntry
	// ContentType is the type of the file's extension, or
	// application/octet-stream: never sniffed, so a file an agent wrote
	// is not served as a page. The HTTP layer is to send it with
	// X-Content-Type-Options: nosniff and a Content-Security-Policy of
	// sandbox, so an HTML file of the workspace runs nothing on the
	// console's origin.
	ContentType string
}

// WriteFileOptions qualify a write.
type WriteFileOptions struct {
	// IfMatch, when set, is the ETag the file must still have (or "*":
	// the file must exist); else precondition_failed.
	IfMatch string
	// Mode is the new file's permission bits; 0 is 0644.
	Mode fs.FileMode
}

// ArchiveSummary tells what an archive held or an unpack made.
type ArchiveSummary struct {
	Entries int            `json:"entries"`
	Bytes   int64          `json:"bytes"` // bytes of regular files
	Skipped []SkippedEntry `json:"skipped,omitempty"`
}

// SkippedEntry is an entry an archive or an unpack left out, and why.
type SkippedEntry struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}
