package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"
	gzip "github.com/klauspost/compress/gzip"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The workspace routes (docs/workspace.md): a sandbox's files, its archive, and
// what a turn changed. Full token only: a stream token reads events, not
// files. Every path is relative to the workspace and resolved by the
// Backend's sandbox.Files (internal/workspace, through one os.Root), so
// nothing here needs to check one beyond taking it from the URL.

// Listing pages.
const (
	defaultFilePage = 100
	maxFilePage     = sandbox.MaxFileList
)

type fileList struct {
	Object  string              `json:"object"`
	Data    []sandbox.FileEntry `json:"data"`
	HasMore bool                `json:"has_more"`
}

type fileDeleted struct {
	Path    string `json:"path"`
	Deleted bool   `json:"deleted"`
}

// filePath is the workspace path of a files route: "" for the root.
func filePath(ps httprouter.Params) string {
	return strings.TrimPrefix(ps.ByName("path"), "/")
}

// getFile answers a file's bytes or a directory's listing.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	f, err := s.b.Files(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	p := filePath(ps)
	e, err := f.Stat(p)
	if err != nil {
		return err
	}
	if e.Type == sandbox.EntryDir {
		limit, err := queryLimit(r, defaultFilePage, maxFilePage)
		if err != nil {
			return err
		}
		list, more, err := f.List(p, limit, r.URL.Query().Get("after"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, fileList{Object: "list", Data: list, HasMore: more})
		return nil
	}
	file, err := f.ReadFile(p)
	if err != nil {
		return err
	}
	defer file.Close()
	h := w.Header()
	// A file an agent wrote is never a page of the console's origin: not
	// sniffed, and sandboxed if a browser opens it.
	h.Set("Content-Type", textCharset(file.ContentType))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("ETag", file.ETag)
	if r.URL.Query().Get("download") != "" {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(file.Path)}))
	}
	http.ServeContent(w, r, "", file.ModifiedAt, file)
	return nil
}

// textCharset marks text types as UTF-8, which is what agents write.
func textCharset(ct string) string {
	if strings.HasPrefix(ct, "text/") && !strings.Contains(ct, "charset") {
		return ct + "; charset=utf-8"
	}
	return ct
}

// putFile writes one file from the raw body.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	f, err := s.b.Files(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	p := filePath(ps)
	size := r.ContentLength
	if size < 0 {
		size = 0 // unknown: the guard catches what passes the limit as it is written
	}
	if err := f.Room(size); err != nil {
		return err
	}
	if r.Header.Get("If-None-Match") == "*" {
		if _, err := f.Stat(p); err == nil {
			return sandbox.Errorf(sandbox.EPreconditionFailed, "If-None-Match *: %q exists", p)
		}
	}
	e, created, err := f.WriteFile(p, r.Body, sandbox.WriteFileOptions{IfMatch: r.Header.Get("If-Match")})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("ETag", e.ETag)
	writeJSON(w, status, e)
	return nil
}

// deleteFile removes a file, a link, or a directory with ?recursive=true.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	f, err := s.b.Files(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	p := filePath(ps)
	if err := f.Remove(p, recursive); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileDeleted{Path: path.Clean(p), Deleted: true})
	return nil
}

// queryBool reads a boolean query parameter: absent is false.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, sandbox.Errorf(sandbox.EInvalidRequest, "%s=%q is not true or false", name, v)
	}
	return b, nil
}

// getArchive streams the workspace, or a directory of it, as tar.gz.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	id := ps.ByName("id")
	f, err := s.b.Files(r.Context(), id)
	if err != nil {
		return err
	}
	defer f.Close()
	dir := r.URL.Query().Get("path")
	// The directory is checked before the answer starts: past the first
	// byte an error can only cut the stream.
	e, err := f.Stat(dir)
	if err != nil {
		return err
	}
	if e.Type != sandbox.EntryDir {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%q is not a directory; GET its path under /files for a file", dir)
	}
	name := id + ".tar.gz"
	if base := path.Base(e.Path); e.Path != "." && base != "." {
		name = id + "-" + base + ".tar.gz"
	}
	h := w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.WriteHeader(http.StatusOK)
	if _, err := f.Archive(w, dir); err != nil {
		// Too late for an error answer: the client sees a cut gzip
		// stream, which fails to decode.
		s.log.Warn("archive cut short", "request_id", requestID(w), "sandbox_id", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// putArchive unpacks a tar or tar.gz body into the workspace.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	f, err := s.b.Files(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	size := r.ContentLength
	if size < 0 {
		size = 0
	}
	if err := f.Room(size); err != nil {
		return err
	}
	body, err := tarReader(r.Body)
	if err != nil {
		return err
	}
	sum, err := f.Unpack(body, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sum)
	return nil
}

// tarReader gives the tar stream of a body that is a tar or a tar.gz,
// told apart by gzip's magic bytes rather than a header clients get
// wrong.
func tarReader(body io.Reader) (io.Reader, error) {
	br := bufio.NewReader(body)
	magic, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return br, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.EInvalidRequest, "the body is not a valid gzip stream: %v", err)
	}
	return zr, nil
}

// getDiff answers the unified diff of what a turn changed, streamed: a
// turn that changed thousands of files has a diff of any length.
func (s *Server) getDiff(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	out := &diffWriter{w: w}
	err := s.b.Diff(r.Context(), ps.ByName("id"), ps.ByName("turn_id"), out)
	switch {
	case err != nil && !out.started:
		return err
	case err != nil:
		s.log.Warn("diff cut short", "request_id", requestID(w), "sandbox_id", ps.ByName("id"), "err", err)
		panic(http.ErrAbortHandler)
	case !out.started:
		out.start() // nothing changed: an empty diff
	}
	return nil
}

// diffWriter sends the diff's headers with its first bytes, so that an
// error found before any (an unknown turn, one still running) is still
// an error answer.
type diffWriter struct {
	w       http.ResponseWriter
	started bool
}

func (d *diffWriter) start() {
	d.started = true
	h := d.w.Header()
	h.Set("Content-Type", "text/x-diff; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	d.w.WriteHeader(http.StatusOK)
}

func (d *diffWriter) Write(p []byte) (int, error) {
	if !d.started {
		d.start()
	}
	return d.w.Write(p)
}

// revertTurn puts the workspace back as it was when a turn started.
func (s *Server) revertTurn(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	if err := decodeBody(w, r, &struct{}{}); err != nil {
		return err
	}
	sb, err := s.b.Revert(r.Context(), ps.ByName("id"), ps.ByName("turn_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}
