package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The workspace API (docs/workspace.md): a sandbox's files, read and written one
// by one or as a tar.gz, and what each turn changed. Every call needs the
// server token; a stream token is refused with ErrForbidden.

// Sentinels of the error types the workspace API adds, for errors.Is.
var (
	// ErrPreconditionFailed: a write whose IfMatch or IfNoneMatch no
	// longer holds (412); read the file again, then write.
	ErrPreconditionFailed = &Error{Type: sandbox.EPreconditionFailed}
	// ErrInsufficientStorage: a write or an unpack past the sandbox's
	// disk limit or the server's disk reserve (507); the message names
	// the flag.
	ErrInsufficientStorage = &Error{Type: sandbox.EInsufficientStorage}
)

// ErrIsDirectory is ReadFile's answer for a path that names a
// directory, and ErrNotDirectory that of Files for a path that names a
// file: the server answered, the call asked for the other kind.
var (
	ErrIsDirectory  = errors.New("the path is a directory, not a file")
	ErrNotDirectory = errors.New("the path is a file, not a directory")
)

// Entry types of FileEntry.Type.
const (
	EntryFile    = sandbox.EntryFile
	EntryDir     = sandbox.EntryDir
	EntrySymlink = sandbox.EntrySymlink
	// EntryOther is a socket, a device or a FIFO: listed, never read.
	EntryOther = sandbox.EntryOther
)

// FileEntry is one entry of the workspace. Path is its full path from the
// workspace root, with forward slashes; Size is 0 for a directory and the
// length of its target for a symbolic link. It is sandbox.FileEntry as a
// client sees it: with what ReadFile and WriteFile learn from an answer's
// headers and status besides its body.
type FileEntry struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`

	// ETag is a file's entity tag, quotes included, as ReadFile and
	// WriteFile answer it: pass it as WriteFileOptions.IfMatch to write
	// only over the version that was read. Listings carry none.
	ETag string `json:"-"`
	// ContentType is what the server serves a file as (by its
	// extension); set by ReadFile.
	ContentType string `json:"-"`
	// Created is set by WriteFile when the file was new (201), not
	// replaced (200).
	Created bool `json:"-"`
}

// ListFilesOptions pages a directory listing: at most Limit entries (0
// takes the server's default of 100; at most 1000) whose path sorts after
// After (the Path of the previous page's last entry, "" for the first).
type ListFilesOptions struct {
	Limit int
	After string
}

// FileList is one page of a directory, sorted by path.
type FileList struct {
	Data    []FileEntry `json:"data"`
	HasMore bool        `json:"has_more"`
}

// filesURL is the URL of a workspace path: each segment escaped on its
// own, so a name may hold spaces, "%" or "?". Paths are relative to the
// workspace; "", "." and "/" are its root, and leading and trailing
// slashes are dropped.
func (c *Client) filesURL(query url.Values, id, p string) string {
	segs := []string{"v1", "sandboxes", id, "files"}
	if p = cleanPath(p); p != "." {
		segs = append(segs, strings.Split(p, "/")...)
	}
	return c.endpoint(query, segs...)
}

// cleanPath is the workspace path p as the URL carries it. A ".." that
// climbs out stays, for the server to refuse.
func cleanPath(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// Files returns one page of the directory dir ("" for the workspace
// root); ErrNotDirectory when dir names a file.
func (c *Client) Files(ctx context.Context, id, dir string, o ListFilesOptions) (FileList, error) {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	req, err := c.newRequest(ctx, http.MethodGet, c.filesURL(q, id, dir), nil)
	if err != nil {
		return FileList{}, err
	}
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return FileList{}, err
	}
	defer resp.Body.Close()
	if !isListing(resp) {
		return FileList{}, fmt.Errorf("list %q: %w", dir, ErrNotDirectory)
	}
	var out FileList
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return FileList{}, fmt.Errorf("decode the listing of %q: %w", dir, err)
	}
	return out, nil
}

// AllFiles iterates over every entry of the directory dir, fetching
// pages as it goes. An error ends the iteration after it is yielded.
func (c *Client) AllFiles(ctx context.Context, id, dir string) iter.Seq2[FileEntry, error] {
	return func(yield func(FileEntry, error) bool) {
		o := ListFilesOptions{Limit: 1000}
		for {
			page, err := c.Files(ctx, id, dir, o)
			if err != nil {
				yield(FileEntry{}, err)
				return
			}
			for _, e := range page.Data {
				if !yield(e, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Data) == 0 {
				return
			}
			o.After = page.Data[len(page.Data)-1].Path
		}
	}
}

// isListing tells a directory's listing from a file's bytes, which may
// be JSON too: a file is always served with Accept-Ranges (it answers
// Range requests), a listing never is.
func isListing(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "application/json" && resp.Header.Get("Accept-Ranges") == ""
}

// ReadFile opens the file at p for reading: its bytes as they stream
// from the server, which the caller must close, and its entry from the
// answer's headers (size, modification time to the second, ETag, content
// type). ErrIsDirectory when p names a directory.
func (c *Client) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, FileEntry, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.filesURL(nil, id, p), nil)
	if err != nil {
		return nil, FileEntry{}, err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, FileEntry{}, err
	}
	if isListing(resp) {
		resp.Body.Close()
		return nil, FileEntry{}, fmt.Errorf("read %q: %w", p, ErrIsDirectory)
	}
	e := FileEntry{
		Path:        cleanPath(p),
		Type:        EntryFile,
		Size:        resp.ContentLength,
		ETag:        resp.Header.Get("ETag"),
		ContentType: resp.Header.Get("Content-Type"),
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		e.ModifiedAt = t.UTC()
	}
	return resp.Body, e, nil
}

// StatFile describes the entry at p: a file as ReadFile does, without
// its bytes, or a directory (Type EntryDir, no size or time).
func (c *Client) StatFile(ctx context.Context, id, p string) (FileEntry, error) {
	body, e, err := c.ReadFile(ctx, id, p)
	if errors.Is(err, ErrIsDirectory) {
		return FileEntry{Path: cleanPath(p), Type: EntryDir}, nil
	}
	if err != nil {
		return FileEntry{}, err
	}
	// Closed unread: the transport drops the connection rather than
	// download a large file for nothing.
	body.Close()
	return e, nil
}

// WriteFileOptions qualify a write. IfMatch is the ETag the file must
// still have (as ReadFile or an earlier WriteFile answered it), or "*":
// the file must exist. IfNoneMatch "*" writes only a new file. Either
// failing is ErrPreconditionFailed.
type WriteFileOptions struct {
	IfMatch     string
	IfNoneMatch string
}

// WriteFile writes the file at p from the raw bytes of r, atomically,
// making missing parent directories. The answer is the file's entry with
// its new ETag, and Created set when the file was new.
func (c *Client) WriteFile(ctx context.Context, id, p string, r io.Reader, o WriteFileOptions) (FileEntry, error) {
	req, err := c.rawRequest(ctx, http.MethodPut, c.filesURL(nil, id, p), r)
	if err != nil {
		return FileEntry{}, err
	}
	if o.IfMatch != "" {
		req.Header.Set("If-Match", quoteETag(o.IfMatch))
	}
	if o.IfNoneMatch != "" {
		req.Header.Set("If-None-Match", quoteETag(o.IfNoneMatch))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return FileEntry{}, c.classify(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return FileEntry{}, decodeError(resp)
	}
	var e FileEntry
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return FileEntry{}, fmt.Errorf("decode answer of PUT %s: %w", req.URL.Path, err)
	}
	e.ETag = resp.Header.Get("ETag")
	e.Created = resp.StatusCode == http.StatusCreated
	return e, nil
}

// quoteETag puts the quotes an entity tag needs around a bare one, so a
// tag copied without them still matches.
func quoteETag(tag string) string {
	if tag == "*" || strings.HasPrefix(tag, `"`) || strings.HasPrefix(tag, `W/"`) {
		return tag
	}
	return `"` + tag + `"`
}

// DeleteFile removes the file or the empty directory at p; with recursive,
// a directory and everything in it (ErrConflict without it).
func (c *Client) DeleteFile(ctx context.Context, id, p string, recursive bool) error {
	var q url.Values
	if recursive {
		q = url.Values{"recursive": {"true"}}
	}
	return c.call(ctx, http.MethodDelete, c.filesURL(q, id, p), nil, http.StatusOK, nil)
}

// archiveURL is the archive endpoint of directory dir ("" for the root).
func (c *Client) archiveURL(id, dir string) string {
	var q url.Values
	if d := cleanPath(dir); d != "." {
		q = url.Values{"path": {d}}
	}
	return c.endpoint(q, "v1", "sandboxes", id, "archive")
}

// Archive streams the directory dir ("" for the whole workspace) as a
// tar.gz, entries relative to dir. The caller reads and closes it.
func (c *Client) Archive(ctx context.Context, id, dir string) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.archiveURL(id, dir), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/gzip")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ArchiveSummary is what an unpack made: its entries, the bytes of its
// files, and entries it left out.
type ArchiveSummary = sandbox.ArchiveSummary

// SkippedEntry is an entry an unpack left out, and why.
type SkippedEntry = sandbox.SkippedEntry

// Unpack unpacks the tar or tar.gz read from r into the directory dir ("" for
// the workspace root), made if missing. A bad entry (a name leading out,
// a link out, a device, setuid bits) refuses the whole archive with
// ErrInvalidRequest naming it, nothing unpacked.
func (c *Client) Unpack(ctx context.Context, id, dir string, r io.Reader) (ArchiveSummary, error) {
	req, err := c.rawRequest(ctx, http.MethodPut, c.archiveURL(id, dir), r)
	if err != nil {
		return ArchiveSummary{}, err
	}
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return ArchiveSummary{}, err
	}
	defer resp.Body.Close()
	var out ArchiveSummary
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return ArchiveSummary{}, fmt.Errorf("decode answer of PUT %s: %w", req.URL.Path, err)
	}
	return out, nil
}

// rawRequest is a request whose body is r's bytes as they are, not JSON.
func (c *Client) rawRequest(ctx context.Context, method, u string, r io.Reader) (*http.Request, error) {
	req, err := c.newRequest(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	// NewRequest knows the length of the in-memory readers; others go
	// chunked.
	body, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	req.Body, req.GetBody, req.ContentLength = body.Body, body.GetBody, body.ContentLength
	req.Header.Set("Content-Type", "application/octet-stream")
	return req, nil
}

// Diff returns the unified diff of what turn turnID changed in the
// workspace, as git diff writes it; "" when it changed nothing.
// ErrTurnInProgress while the turn runs; ErrNotFound for a turn whose end
// was not recorded.
func (c *Client) Diff(ctx context.Context, id, turnID string) (string, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", id, "turns", turnID, "diff"), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/x-diff")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read the diff of turn %s: %w", turnID, err)
	}
	return string(b), nil
}

// Revert puts the workspace back as it was when turn turnID started and
// answers the sandbox; the log records it as workspace.reverted.
// ErrTurnInProgress while any turn runs.
func (c *Client) Revert(ctx context.Context, id, turnID string) (sandbox.Sandbox, error) {
	var out sandbox.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", id, "turns", turnID, "revert"), nil, http.StatusOK, &out)
	return out, err
}
