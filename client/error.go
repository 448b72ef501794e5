package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Error is an error answer of the API: the HTTP status and the error object
// of docs/errors.md. Cursor errors (cursor_pruned, cursor_stale) also carry the
// log's watermarks, so a reader can recover without another call.
type Error struct {
	Status  int
	Type    string
	Message string

	OldestEventID uint64
	PrunedThrough uint64
	LastEventID   uint64

	// RequestID is the server's X-Request-Id of the answer: the key to the
	// server log's detail of an internal error.
	RequestID string
}

func (e *Error) Error() string {
	msg := e.Type + ": " + e.Message
	if e.Type == sandbox.EInternal && e.RequestID != "" && !strings.Contains(e.Message, e.RequestID) {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// Is makes errors.Is(err, client.ErrNotFound) and the other sentinels match
// any *Error of the same type.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Type == e.Type && (t.Status == 0 || t.Status == e.Status)
}

// Sentinels of the error types of docs/errors.md, for errors.Is.
var (
	ErrInvalidRequest       = &Error{Type: sandbox.EInvalidRequest}
	ErrInvalidCursor        = &Error{Type: sandbox.EInvalidCursor}
	ErrUnauthorized         = &Error{Type: sandbox.EUnauthorized}
	ErrForbidden            = &Error{Type: sandbox.EForbidden}
	ErrNotFound             = &Error{Type: sandbox.ENotFound}
	ErrConflict             = &Error{Type: sandbox.EConflict}
	ErrTurnInProgress       = &Error{Type: sandbox.ETurnInProgress}
	ErrApprovalResolved     = &Error{Type: sandbox.EApprovalResolved}
	ErrCursorPruned         = &Error{Type: sandbox.ECursorPruned}
	ErrCursorStale          = &Error{Type: sandbox.ECursorStale}
	ErrPayloadTooLarge      = &Error{Type: sandbox.EPayloadTooLarge}
	ErrUnsupportedMediaType = &Error{Type: sandbox.EUnsupportedMediaType}
	ErrInternal             = &Error{Type: sandbox.EInternal}
)

// IsType reports whether err is, or wraps, an API *Error of the given type
// (one of the sandbox.E… constants, e.g. "cursor_pruned").
func IsType(err error, typ string) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == typ
}

// UnreachableError is a request that never reached a server: nothing
// listens at the URL, or its host does not resolve. It is distinct from an
// answer of the server, so callers can tell "not running" from "refused".
type UnreachableError struct {
	URL string // the base URL of the client
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no sparkles server at %s: %v", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err is an *UnreachableError: the server
// was not running (or not reachable) at the client's URL.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}

// classify turns a transport error into an *UnreachableError when the
// connection could not be made at all. Errors after a connection was made
// (a reset, a timeout mid-answer) stay as they are: the server was there.
func (c *Client) classify(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &UnreachableError{URL: c.base, Err: op.Err}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return &UnreachableError{URL: c.base, Err: dns}
	}
	return err
}

// maxErrorBody bounds what is read of an error answer; the API's are small,
// and a proxy's HTML page needs no more than a glimpse.
const maxErrorBody = 64 << 10

// wireError is the error object of docs/errors.md with its optional watermarks.
type wireError struct {
	Error struct {
		Type          string      `json:"type"`
		Message       string      `json:"message"`
		OldestEventID sandbox.Seq `json:"oldest_event_id"`
		PrunedThrough sandbox.Seq `json:"pruned_through"`
		LastEventID   sandbox.Seq `json:"last_event_id"`
	} `json:"error"`
}

// decodeError reads the error answer of a non-2xx response. An answer that
// is not the API's error object (a proxy in between, another server) still
// becomes an *Error, typed by its status, so callers have one kind to check.
func decodeError(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var w wireError
	if json.Unmarshal(body, &w) == nil && w.Error.Type != "" {
		e.Type, e.Message = w.Error.Type, w.Error.Message
		e.OldestEventID = uint64(w.Error.OldestEventID)
		e.PrunedThrough = uint64(w.Error.PrunedThrough)
		e.LastEventID = uint64(w.Error.LastEventID)
		return e
	}
	e.Type = sandbox.TypeOfStatus(resp.StatusCode)
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "…"
	}
	e.Message = "unexpected answer " + strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	if snippet != "" {
		e.Message += ": " + snippet
	}
	return e
}
