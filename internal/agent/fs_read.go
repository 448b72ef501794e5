package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"unicode/utf8"
)

// MaxFSMessage bounds one fs message in JSON: the whole answer line of
// fs/read_text_file and the params of fs/write_text_file. 8 MiB is twice
// what the largest model context (about a million tokens, 4 MiB of text)
// can take in, with room for the escapes JSON adds to source text (quotes,
// tabs, newlines: 10-20%), so no answer an agent could use is refused; yet
// an answer costs at most this once in memory, where a file of control
// bytes used to cost 40 times its size (each byte written as \u0000, the
// buffers doubled, two encodings). A larger file is read in parts, with
// line and limit.
const MaxFSMessage = 8 << 20

const (
	// maxFSScan bounds how far into a file a read looks for the line it
	// starts at. The scan holds no memory, but it is the server's CPU: a
	// sparse file of a terabyte costs the agent nothing to make.
	maxFSScan = 1 << 30

	// fsChunk is how much of a file is read at a time.
	fsChunk = 32 << 10
)

// The answer line of fs/read_text_file around the id and the quoted text.
const (
	answerHead = `{"jsonrpc":"2.0","id":`
	answerMid  = `,"result":{"content":"`
	answerTail = "\"}}\n"
)

var chunks = sync.Pool{New: func() any { return new([fsChunk]byte) }}

var (
	errTooLarge = errors.New("the answer would be too large")
	errTooFar   = errors.New("the line starts too far into the file")
	errChanged  = errors.New("the file changed while it was read")
)

// readAnswer reads the text of a file, from the 1-based line on and at most
// limit lines (a missing or non-positive line or limit means from the start
// and to the end), and returns the whole JSON-RPC answer line for id. The
// line is encoded once, straight into a buffer of its exact size: a first
// pass over the file measures what the lines asked for take once quoted, so
// that an answer over MaxFSMessage is refused before anything is held, and
// the budget is asked for exactly what the answer takes. Release gives it
// back once the line is written. A file that does not exist inside the
// sandbox reads as empty.
func (f *fsRoot) readAnswer(q *fsQuota, id json.RawMessage, path string, line, limit *int64) (answer []byte, release func(), rpcErr *RPCError) {
	rel, rpcErr := f.rel(path)
	if rpcErr != nil {
		return nil, nil, rpcErr
	}
	id = compactID(id)
	overhead := len(answerHead) + len(id) + len(answerMid) + len(answerTail)
	maxQuoted := MaxFSMessage - overhead
	if maxQuoted < 0 {
		return nil, nil, &RPCError{Code: codeInvalidParams, Message: fmt.Sprintf("the id of this fs/read_text_file takes more than the %d MiB of its answer", MaxFSMessage>>20)}
	}
	file, err := f.root.OpenFile(rel, os.O_RDONLY|openNoBlock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// As Zed answers (its buffer store opens a missing path as a new,
		// empty buffer): agents read a file before they create it, and
		// Gemini CLI fails its write tool on any error here. os.Root walks
		// no further than the sandbox allows, so a way out (a "..", a
		// symlink leaving it, even to nothing) is refused as an escape
		// before anything can be found missing.
		return answerLine(q, id, path, nil, span{}, overhead)
	}
	if err != nil {
		return nil, nil, fsError("read", path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, nil, fsError("read", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, &RPCError{Code: codeInvalidParams, Message: "not a regular file: " + path}
	}
	tooLarge := func(size int64) *RPCError {
		return &RPCError{Code: codeInvalidParams, Message: fmt.Sprintf(
			"cannot read %s: the answer would be larger than the %d MiB an fs/read_text_file answer may take (the file is %d bytes); read it in parts with line and limit",
			path, MaxFSMessage>>20, size)}
	}
	skip, take := lineRange(line, limit)
	// Every byte takes at least one byte once quoted, so a whole file
	// larger than the answer's room is refused without reading it.
	if skip == 0 && take == 0 && st.Size() > int64(maxQuoted) {
		return nil, nil, tooLarge(st.Size())
	}
	buf := chunks.Get().(*[fsChunk]byte)
	defer chunks.Put(buf)
	// The two passes must see the same file; one that an agent's process
	// keeps writing is measured again, a few times.
	for range 3 {
		sp, err := measure(q.context(), io.NewSectionReader(file, 0, math.MaxInt64), buf[:], skip, take, maxQuoted)
		switch {
		case errors.Is(err, errTooLarge):
			return nil, nil, tooLarge(st.Size())
		case errors.Is(err, errTooFar):
			return nil, nil, &RPCError{Code: codeInvalidParams, Message: fmt.Sprintf(
				"cannot read %s: line %d starts beyond the first %d MiB of the file, which is as far as fs/read_text_file looks", path, *line, maxFSScan>>20)}
		case err != nil:
			return nil, nil, fsError("read", path, err)
		}
		answer, release, rpcErr := answerLine(q, id, path, file, sp, overhead)
		if rpcErr != nil {
			return nil, nil, rpcErr
		}
		now, err := file.Stat()
		if answer != nil && err == nil && now.Size() == st.Size() && now.ModTime().Equal(st.ModTime()) {
			return answer, release, nil
		}
		if answer != nil {
			release()
		}
		if err != nil {
			return nil, nil, fsError("read", path, err)
		}
		st = now
	}
	return nil, nil, &RPCError{Code: codeInternal, Message: "cannot read " + path + ": it kept changing while it was read"}
}

// answerLine takes the budget for the answer line and encodes the span of
// file into it. No answer and no error means that the span no longer fits
// the size measured: the file changed in between.
func answerLine(q *fsQuota, id json.RawMessage, path string, file io.ReaderAt, sp span, overhead int) ([]byte, func(), *RPCError) {
	size := overhead + sp.quoted
	release, rpcErr := q.acquire(int64(size))
	if rpcErr != nil {
		return nil, nil, rpcErr
	}
	out := make([]byte, 0, size)
	out = append(out, answerHead...)
	out = append(out, id...)
	out = append(out, answerMid...)
	if sp.end > sp.start {
		buf := chunks.Get().(*[fsChunk]byte)
		defer chunks.Put(buf)
		var err error
		out, err = encodeSpan(io.NewSectionReader(file, sp.start, sp.end-sp.start), buf[:], out, size-len(answerTail))
		if err != nil {
			release()
			if errors.Is(err, errChanged) {
				return nil, nil, nil
			}
			return nil, nil, fsError("read", path, err)
		}
	}
	return append(out, answerTail...), release, nil
}

// lineRange turns ACP's line and limit into the newlines to skip and the
// lines to take (0: all of them).
func lineRange(line, limit *int64) (skip, take int64) {
	if line != nil && *line > 1 {
		skip = *line - 1
	}
	if limit != nil && *limit > 0 {
		take = *limit
	}
	return skip, take
}

// span is where the lines asked for lie in a file, and how many bytes they
// take once quoted as a JSON string.
type span struct {
	start, end int64
	quoted     int
}

// measure finds the span of the lines asked for: it skips skip lines, then
// takes take lines (all, when 0), reading r through buf. It holds nothing
// but buf, and stops with errTooLarge once the quoted text passes
// maxQuoted, or errTooFar once the lines it skips pass maxFSScan.
func measure(ctx context.Context, r io.Reader, buf []byte, skip, take int64, maxQuoted int) (span, error) {
	var sp span
	var pos int64 // the file offset of buf[0]
	kept := 0     // bytes at the front of buf: a character the last read cut
	selecting := skip == 0
	for {
		if err := ctx.Err(); err != nil {
			return sp, err
		}
		n, err := r.Read(buf[kept:])
		n += kept
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return sp, err
		}
		p := buf[:n]
		i := 0
		for !selecting && i < len(p) {
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				i = len(p)
				break
			}
			i += j + 1
			if skip--; skip == 0 {
				selecting = true
				sp.start = pos + int64(i)
				sp.end = sp.start
			}
		}
		kept = 0
		if selecting {
			seg, done := p[i:], false
			for k := 0; take > 0; {
				j := bytes.IndexByte(seg[k:], '\n')
				if j < 0 {
					break
				}
				k += j + 1
				if take--; take == 0 {
					seg, done = seg[:k], true
				}
			}
			if !done && !eof {
				whole := completeRunes(seg)
				kept = len(seg) - whole
				seg = seg[:whole]
			}
			sp.quoted += quotedSize(seg)
			sp.end += int64(len(seg))
			if sp.quoted > maxQuoted {
				return sp, errTooLarge
			}
			if done {
				return sp, nil
			}
		} else if pos+int64(n) > maxFSScan {
			return sp, errTooFar
		}
		if eof {
			return sp, nil
		}
		copy(buf, p[n-kept:])
		pos += int64(n - kept)
	}
}

// encodeSpan quotes what r holds onto dst, which may grow to limit bytes
// and no further: more means the file is no longer what measure saw.
func encodeSpan(r io.Reader, buf, dst []byte, limit int) ([]byte, error) {
	kept := 0
	for {
		n, err := r.Read(buf[kept:])
		n += kept
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return dst, err
		}
		seg := buf[:n]
		kept = 0
		if !eof {
			whole := completeRunes(seg)
			kept = n - whole
			seg = seg[:whole]
		}
		if len(dst)+quotedSize(seg) > limit {
			return dst, errChanged
		}
		dst = appendQuoted(dst, seg)
		if eof {
			return dst, nil
		}
		copy(buf, buf[n-kept:n])
	}
}

// completeRunes returns how much of p ends on a whole UTF-8 character: the
// rest is the start of one that the next read completes.
func completeRunes(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// compactID returns the agent's id as one line, as encoding/json would
// write it back.
func compactID(id json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(id, " \t\r\n") {
		return id
	}
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return id
	}
	return b.Bytes()
}
