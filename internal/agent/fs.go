package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MaxReadFile bounds the files fs/read_text_file returns: the answer is one
// line on the agent's stdin, held in memory while it is written.
const MaxReadFile = 16 << 20

// fsRoot serves the agent's file requests, confined to the sandbox directory.
// os.Root does the confinement that matters (no "..", no symlink leaving the
// directory, checked at each step of the walk); this type only maps the
// agent's absolute paths onto it.
type fsRoot struct {
	root *os.Root
	dirs []string // the sandbox directory as given, and with symlinks resolved
	once sync.Once
}

func openFSRoot(dir string) (*fsRoot, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	f := &fsRoot{root: root, dirs: []string{dir}}
	// The agent may build paths from either form (on some systems the
	// temporary directory itself is a symlink).
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		f.dirs = append(f.dirs, real)
	}
	return f, nil
}

func (f *fsRoot) close() { f.once.Do(func() { f.root.Close() }) }

var errOutside = &RPCError{Code: codeInvalidParams, Message: "path is outside the sandbox"}

// rel turns a path from the agent into one relative to the sandbox directory.
// ACP paths are absolute; relative ones are taken as relative to the sandbox.
func (f *fsRoot) rel(p string) (string, *RPCError) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", &RPCError{Code: codeInvalidParams, Message: "path is missing or invalid"}
	}
	if filepath.IsAbs(p) {
		p = filepath.Clean(p)
		for _, d := range f.dirs {
			if r, err := filepath.Rel(d, p); err == nil && filepath.IsLocal(r) {
				return r, nil
			}
		}
		return "", errOutside
	}
	if !filepath.IsLocal(p) {
		return "", errOutside
	}
	return filepath.Clean(p), nil
}

// read returns the text of a file, from the 1-based line on and at most limit
// lines; a missing or non-positive line or limit means from the start and to
// the end. A file that does not exist inside the sandbox reads as empty.
func (f *fsRoot) read(path string, line, limit *int64) (string, *RPCError) {
	rel, rpcErr := f.rel(path)
	if rpcErr != nil {
		return "", rpcErr
	}
	file, err := f.root.OpenFile(rel, os.O_RDONLY|openNoBlock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// As Zed answers (its buffer store opens a missing path as a new,
		// empty buffer): agents read a file before they create it, and
		// Gemini CLI fails its write tool on any error here. os.Root walks
		// no further than the sandbox allows, so a way out (a "..", a
		// symlink leaving it, even to nothing) is refused as an escape
		// before anything can be found missing.
		return "", nil
	}
	if err != nil {
		return "", fsError("read", path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return "", fsError("read", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", &RPCError{Code: codeInvalidParams, Message: "not a regular file: " + path}
	}
	tooLarge := &RPCError{Code: codeInvalidParams, Message: fmt.Sprintf("file is larger than %d MiB: %s", MaxReadFile>>20, path)}
	if st.Size() > MaxReadFile {
		return "", tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(file, MaxReadFile+1))
	if err != nil {
		return "", fsError("read", path, err)
	}
	if len(b) > MaxReadFile { // it grew since Stat
		return "", tooLarge
	}
	return sliceLines(string(b), line, limit), nil
}

func sliceLines(s string, line, limit *int64) string {
	start, n := int64(1), int64(0)
	if line != nil && *line > 1 {
		start = *line
	}
	if limit != nil && *limit > 0 {
		n = *limit
	}
	if start == 1 && n == 0 {
		return s
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if start > int64(len(lines)) {
		return ""
	}
	end := int64(len(lines))
	if n > 0 && start-1+n < end {
		end = start - 1 + n
	}
	return strings.Join(lines[start-1:end], "")
}

// write replaces (or creates) a file, creating its parent directories.
func (f *fsRoot) write(path, content string) *RPCError {
	rel, rpcErr := f.rel(path)
	if rpcErr != nil {
		return rpcErr
	}
	if d := filepath.Dir(rel); d != "." {
		if err := f.root.MkdirAll(d, 0o755); err != nil {
			return fsError("write", path, err)
		}
	}
	file, err := f.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|openNoBlock, 0o644)
	if err != nil {
		return fsError("write", path, err)
	}
	st, err := file.Stat()
	if err == nil && !st.Mode().IsRegular() {
		file.Close()
		return &RPCError{Code: codeInvalidParams, Message: "not a regular file: " + path}
	}
	if err == nil {
		_, err = io.WriteString(file, content)
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError("write", path, err)
	}
	return nil
}

// fsError maps a file error to a JSON-RPC error for the agent. The message
// names the path as the agent gave it, never a resolved one.
func fsError(op, path string, err error) *RPCError {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &RPCError{Code: codeNotFound, Message: "file not found: " + path}
	case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes"):
		// os.Root refused a ".." or a symlink that leaves the sandbox.
		return errOutside
	case errors.As(err, &pe):
		return &RPCError{Code: codeInternal, Message: fmt.Sprintf("cannot %s %s: %v", op, path, pe.Err)}
	}
	return &RPCError{Code: codeInternal, Message: fmt.Sprintf("cannot %s %s", op, path)}
}

type (
	readParams struct {
		SessionID string `json:"sessionId"`
		Path      string `json:"path"`
		Line      *int64 `json:"line"`
		Limit     *int64 `json:"limit"`
	}
	readResult struct {
		Content string `json:"content"`
	}
	writeParams struct {
		SessionID string `json:"sessionId"`
		Path      string `json:"path"`
		Content   string `json:"content"`
	}
)

// serveFS answers fs/read_text_file and fs/write_text_file.
func (c *Conn) serveFS(method string, params json.RawMessage) (any, *RPCError) {
	badParams := &RPCError{Code: codeInvalidParams, Message: "invalid params for " + method}
	switch method {
	case "fs/read_text_file":
		var p readParams
		if json.Unmarshal(params, &p) != nil {
			return nil, badParams
		}
		if rpcErr := c.checkSession(p.SessionID); rpcErr != nil {
			return nil, rpcErr
		}
		content, rpcErr := c.files.read(p.Path, p.Line, p.Limit)
		if rpcErr != nil {
			c.log.Debug("agent file read refused", "path", p.Path, "err", rpcErr.Message)
			return nil, rpcErr
		}
		return readResult{Content: content}, nil
	case "fs/write_text_file":
		var p writeParams
		if json.Unmarshal(params, &p) != nil {
			return nil, badParams
		}
		if rpcErr := c.checkSession(p.SessionID); rpcErr != nil {
			return nil, rpcErr
		}
		if rpcErr := c.files.write(p.Path, p.Content); rpcErr != nil {
			c.log.Debug("agent file write refused", "path", p.Path, "err", rpcErr.Message)
			return nil, rpcErr
		}
		// The schema's WriteTextFileResponse is an (empty) object.
		return struct{}{}, nil
	}
	return nil, &RPCError{Code: codeMethodNotFound, Message: "method not found: " + method}
}

// checkSession refuses requests for another session. Before session/new has
// answered there is no session to compare with yet.
func (c *Conn) checkSession(id string) *RPCError {
	if s := c.sessionID(); s != "" && id != s {
		return &RPCError{Code: codeInvalidParams, Message: "unknown session"}
	}
	return nil
}
