package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// decodeBody decodes the JSON object in r's body into v. An empty body
// leaves v as it is, so callers decide whether a body is required.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBodyMax(w, r, v, maxBodyBytes)
}

// decodeBodyMax is decodeBody for a body of up to limit bytes.
func decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	// The body has a deadline of its own: http.Server's ReadTimeout would
	// also end every stream, and without one a client sending a byte now
	// and then holds a goroutine forever.
	var rc *http.ResponseController
	timeout := defaultBodyTimeout
	if rw, ok := w.(*responseWriter); ok {
		rc, timeout = rw.rc, rw.bodyTimeout
		// MaxBytesReader tells the connection's own writer to close after
		// an oversized body rather than read the rest of it.
		w = rw.ResponseWriter
	}
	if rc != nil {
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && rc != nil {
		// Only a body read whole lifts the deadline: after a failed one,
		// net/http discards the rest of the body before it answers, and
		// that read must fail at once rather than wait on the client.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return sandbox.Errorf(sandbox.EPayloadTooLarge, "request body is larger than %d bytes", limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "the request body did not arrive within %s; send it whole and at once", timeout)
		}
		// Anything else is a client that went away mid-body: nobody reads
		// the answer, and it is no fault of the server.
		return &clientGoneError{err: err}
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil
	}
	if ct := r.Header.Get("Content-Type"); !isJSONType(ct) {
		if ct == "" {
			return sandbox.Errorf(sandbox.EUnsupportedMediaType, "a request body needs Content-Type: application/json")
		}
		return sandbox.Errorf(sandbox.EUnsupportedMediaType, "Content-Type %q is not supported; send application/json", ct)
	}
	if trimmed[0] != '{' {
		return sandbox.Errorf(sandbox.EInvalidRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return sandbox.Errorf(sandbox.EInvalidRequest, "request body has data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// describeJSONError turns a decoding error into a sentence that names the
// problem and where it is.
func describeJSONError(err error) string {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("request body is not valid JSON: %s (at byte %d)", e.Error(), e.Offset)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if e.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", e.Field, jsonKind(e.Type.Kind().String()), e.Value)
		}
		return fmt.Sprintf("request body must be a JSON object, not %s", e.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "request body is not valid JSON: it ends in the middle of a value"
	}
	// DisallowUnknownFields reports `json: unknown field "x"`.
	return "request body has an " + strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}

// parseCursor parses an event cursor: a non-negative decimal integer,
// digits only. Anything else is invalid_cursor. A number beyond 64 bits is
// a well-formed cursor beyond every log's last id, so it reads as the
// largest id and the log answers it cursor_stale (docs/stream.md).
func parseCursor(s string) (uint64, error) {
	if s == "" {
		return 0, sandbox.Errorf(sandbox.EInvalidCursor, "cursor is empty; send a non-negative decimal event id")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, sandbox.Errorf(sandbox.EInvalidCursor, "cursor %q is not a non-negative decimal event id", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return math.MaxUint64, nil
	}
	return v, nil
}

// cursorOf returns the cursor a request asks to resume from: the
// Last-Event-ID header, else the since parameter. given is false when the
// request names none.
func cursorOf(r *http.Request) (cursor uint64, given bool, err error) {
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		cursor, err = parseCursor(h)
		return cursor, true, err
	}
	if q := r.URL.Query(); q.Has("since") {
		cursor, err = parseCursor(q.Get("since"))
		return cursor, true, err
	}
	return 0, false, nil
}

// queryLimit returns the limit parameter of r, def when absent, and an
// invalid_request outside 1..max.
func queryLimit(r *http.Request, def, max int) (int, error) {
	q := r.URL.Query()
	if !q.Has("limit") {
		return def, nil
	}
	s := q.Get("limit")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, sandbox.Errorf(sandbox.EInvalidRequest, "limit %q must be an integer from 1 to %d", s, max)
	}
	return n, nil
}

// clientGoneError is a request whose client went away before its body was
// read whole.
type clientGoneError struct{ err error }

func (e *clientGoneError) Error() string { return "client went away mid-body: " + e.err.Error() }
func (e *clientGoneError) Unwrap() error { return e.err }
