package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// fsRoot serves the agent's file requests, confined to the sandbox directory.
// os.Root does the confinement that matters (no "..", no symlink leaving the
// directory, checked at each step of the walk); this type only maps the
// agent's absolute paths onto it.
type fsRoot struct {
	root  *os.Root
	dirs  []string // the sandbox directory as given, and with symlinks resolved
	owner *fsOwner // who gets what the server creates for the agent; nil: the server
	once  sync.Once
}

// fsOwner is the uid and gid of a sandbox directory that a root server
// does not own: its agent's (confine.AgentID). What the server writes
// there on the agent's behalf becomes the agent's, or the agent could not
// change the files it asked for.
type fsOwner struct{ uid, gid int }

func openFSRoot(dir string) (*fsRoot, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	f := &fsRoot{root: root, dirs: []string{dir}, owner: ownerOf(root)}
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

// write replaces (or creates) a file, creating its parent directories.
func (f *fsRoot) write(path string, content []byte) *RPCError {
	rel, rpcErr := f.rel(path)
	if rpcErr != nil {
		return rpcErr
	}
	if d := filepath.Dir(rel); d != "." {
		if err := f.mkdirAll(d); err != nil {
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
	if err == nil && f.owner != nil {
		err = file.Chown(f.owner.uid, f.owner.gid)
	}
	if err == nil {
		_, err = file.Write(content)
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError("write", path, err)
	}
	return nil
}

// mkdirAll makes dir and its missing parents, each the owner's.
func (f *fsRoot) mkdirAll(dir string) error {
	if f.owner == nil {
		return f.root.MkdirAll(dir, 0o755)
	}
	parts := strings.Split(dir, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		err := f.root.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			err = f.root.Lchown(p, f.owner.uid, f.owner.gid)
		}
		if err != nil {
			return err
		}
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
		Content   fsText `json:"content"`
	}
)

// fsText is the content of a write, decoded straight from the request's
// bytes into one buffer of at most their size, where encoding/json decodes
// a string with escapes (every newline is one) into a buffer and then
// copies it into the string.
type fsText []byte

// errNotUTF8 refuses a write whose JSON is not UTF-8, as RFC 8259 wants
// it: replacing each byte with U+FFFD, as encoding/json would, could
// triple the content beyond what the budget holds for it. Agents encode
// strings as UTF-8 (JSON.stringify, serde_json) or ASCII (Python).
var errNotUTF8 = errors.New("content is not UTF-8")

func (t *fsText) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	out, err := jsontext.AppendUnquote(make([]byte, 0, len(b)), b)
	if err != nil {
		if !utf8.Valid(b) {
			return errNotUTF8
		}
		// A lone surrogate (\ud800): encoding/json replaces it with
		// U+FFFD where jsontext refuses, and so do we, at the cost of its
		// copies; the content only shrinks.
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		out = []byte(s)
	}
	*t = out
	return nil
}

// serveRead answers fs/read_text_file; see readAnswer.
func (c *Conn) serveRead(id, params json.RawMessage) {
	var p readParams
	if json.Unmarshal(params, &p) != nil {
		c.reply(id, nil, &RPCError{Code: codeInvalidParams, Message: "invalid params for fs/read_text_file"})
		return
	}
	if rpcErr := c.checkSession(p.SessionID); rpcErr != nil {
		c.reply(id, nil, rpcErr)
		return
	}
	answer, release, rpcErr := c.files.readAnswer(c.fsq, id, p.Path, p.Line, p.Limit)
	if rpcErr != nil {
		c.log.Debug("agent file read refused", "path", p.Path, "err", rpcErr.Message)
		c.reply(id, nil, rpcErr)
		return
	}
	defer release()
	if err := c.writeLine(answer); err != nil {
		c.log.Debug("answer agent request", "err", err)
	}
}

// serveWrite answers fs/write_text_file. Its request is bounded like a
// read's answer, before its content is decoded: then the content, at most
// the request's size, is held within the budget until it is on disk.
func (c *Conn) serveWrite(id, params json.RawMessage) {
	if len(params) > MaxFSMessage {
		c.reply(id, nil, &RPCError{Code: codeInvalidParams, Message: fmt.Sprintf(
			"cannot write: the params take %d bytes, more than the %d MiB an fs/write_text_file may take", len(params), MaxFSMessage>>20)})
		return
	}
	release, rpcErr := c.fsq.acquire(int64(len(params)))
	if rpcErr != nil {
		c.reply(id, nil, rpcErr)
		return
	}
	rpcErr = c.writeFile(params)
	release()
	if rpcErr != nil {
		c.reply(id, nil, rpcErr)
		return
	}
	// The schema's WriteTextFileResponse is an (empty) object.
	c.reply(id, struct{}{}, nil)
}

func (c *Conn) writeFile(params json.RawMessage) *RPCError {
	var p writeParams
	if err := json.Unmarshal(params, &p); errors.Is(err, errNotUTF8) {
		return &RPCError{Code: codeInvalidParams, Message: "invalid params for fs/write_text_file: " + err.Error()}
	} else if err != nil {
		return &RPCError{Code: codeInvalidParams, Message: "invalid params for fs/write_text_file"}
	}
	if rpcErr := c.checkSession(p.SessionID); rpcErr != nil {
		return rpcErr
	}
	if rpcErr := c.files.write(p.Path, p.Content); rpcErr != nil {
		c.log.Debug("agent file write refused", "path", p.Path, "err", rpcErr.Message)
		return rpcErr
	}
	return nil
}

// checkSession refuses requests for another session. Before session/new has
// answered there is no session to compare with yet.
func (c *Conn) checkSession(id string) *RPCError {
	if s := c.sessionID(); s != "" && id != s {
		return &RPCError{Code: codeInvalidParams, Message: "unknown session"}
	}
	return nil
}
