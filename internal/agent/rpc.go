package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// JSON-RPC 2.0 and ACP error codes used on the wire.
const (
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
	codeNotFound       = -32002 // ACP: a resource, such as a file, was not found

	// CodeAuthRequired is ACP's error for a request the agent will not
	// serve before it has credentials.
	CodeAuthRequired = -32000
)

// message is any JSON-RPC 2.0 message. Which kind it is follows from which
// fields are present, so ids and payloads stay raw until that is known.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// hasID reports whether the message carries a usable id: a JSON null id is
// what a peer sends when it could not read the id at all.
func (m *message) hasID() bool {
	return len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
}

// RPCError is a JSON-RPC error object, as the agent sent it or as this
// package answers it. Data is raw and unbounded: agents put the useful part
// of an error there as often as in Message (Rust adapters send "Internal
// error" with the cause as a string in data).
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("agent answered with error %d: %s", e.Code, e.Message)
}

// maxLogText bounds each text of an agent's error in one log record: far
// more than any real error needs, far less than a line may carry.
const maxLogText = 16 << 10

// LogValue logs the error whole (code, message, data), each text bounded.
func (e *RPCError) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("code", e.Code),
		slog.String("message", logText([]byte(e.Message))),
		slog.String("data", logText(e.Data)),
	)
}

func logText(b []byte) string {
	if len(b) > maxLogText {
		return string(b[:maxLogText]) + "… (cut)"
	}
	return string(b)
}

// RequestID is the id of a request the agent sent. It keeps the agent's bytes
// exactly (a number, a string, or 0) because the answer must carry the same
// id, and re-encoding a number could change it.
type RequestID struct{ raw json.RawMessage }

// String returns the id as it appeared on the wire, for logs.
func (r RequestID) String() string { return string(r.raw) }

// IsZero reports whether r holds no id at all (not the id 0).
func (r RequestID) IsZero() bool { return len(r.raw) == 0 }

// MarshalJSON writes the id exactly as the agent sent it.
func (r RequestID) MarshalJSON() ([]byte, error) {
	if len(r.raw) == 0 {
		return []byte("null"), nil
	}
	return r.raw, nil
}

// ourID reads the id of a response to one of our requests. Our ids are
// integers; a peer that echoes them as strings is tolerated.
func ourID(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// ProtocolError is why a connection ended when the agent broke the protocol
// rather than exiting on its own.
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return e.msg }

// ExitError is why a connection ended when the agent process exited by itself.
type ExitError struct {
	Code int // exit code, -1 when the process was ended by a signal
	// Reason is why the Launcher's limits stopped the agent (over its
	// memory limit); empty when they did not.
	Reason string
	state  string // "exit status 3", "signal: killed"
}

func (e *ExitError) Error() string {
	if e.Reason != "" {
		return "agent exited: " + e.state + ": " + e.Reason
	}
	return "agent exited: " + e.state
}

// ErrStopped is why a connection ended when Close stopped it.
var ErrStopped = errors.New("agent was stopped")

// errLineTooLong is returned by lineReader once a line passes the bound; the
// rest of that line is never read.
var errLineTooLong = errors.New("line too long")

// lineReader reads newline-terminated lines with a hard bound on the length of
// one line, so an agent cannot make the server buffer without limit.
type lineReader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// next returns the next line without its line ending. The slice is valid only
// until the following call. A last line without a newline is still returned;
// io.EOF comes after it.
func (l *lineReader) next() ([]byte, error) {
	if cap(l.buf) > 1<<20 {
		l.buf = nil // one huge line must not pin its memory for the connection's life
	}
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(chunk) > l.limit+1 { // +1: the newline is not content
			l.buf = nil // drop the partial line's memory at once
			return nil, errLineTooLong
		}
		if need := len(l.buf) + len(chunk); need > cap(l.buf) {
			// Double, rather than append's gentler growth for big slices,
			// so that reading a line near the bound allocates about twice
			// the bound in all, not five times.
			nb := make([]byte, len(l.buf), min(max(2*cap(l.buf), need), l.limit+1))
			copy(nb, l.buf)
			l.buf = nb
		}
		l.buf = append(l.buf, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(l.buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return bytes.TrimRight(l.buf, "\r\n"), nil
		default:
			return nil, err
		}
	}
}

// encodeLine marshals v as one line of JSON, ready for a single Write.
func encodeLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// request, notification and response are the shapes this package writes.
type request struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// response carries Result pre-encoded so that a nil result is still sent as
// an explicit null: JSON-RPC requires either result or error.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}
