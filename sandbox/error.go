package sandbox

import (
	"errors"
	"fmt"
)

// Error types of docs/errors.md. Each has one HTTP status: HTTPStatus.
const (
	EInvalidRequest       = "invalid_request"
	EInvalidCursor        = "invalid_cursor"
	EUnauthorized         = "unauthorized"
	EForbidden            = "forbidden"
	ENotFound             = "not_found"
	EConflict             = "conflict"
	ETurnInProgress       = "turn_in_progress"
	EApprovalResolved     = "approval_resolved"
	ECursorPruned         = "cursor_pruned"
	ECursorStale          = "cursor_stale"
	EPayloadTooLarge      = "payload_too_large"
	EUnsupportedMediaType = "unsupported_media_type"
	EInternal             = "internal"
	// EUnavailable: the store cannot take writes (disk full, store
	// unreachable). Reads keep working; a write is worth trying again later.
	EUnavailable = "unavailable"
	// EPreconditionFailed: a conditional write (If-Match) whose
	// condition no longer holds (412); read again, then write.
	EPreconditionFailed = "precondition_failed"
	// EInsufficientStorage: a write into a workspace would pass a disk
	// limit (--sandbox-disk-max, --disk-reserve), which the message
	// names (507).
	EInsufficientStorage = "insufficient_storage"
)

// errorStatus is the HTTP status of each error type, in the order of the
// table of docs/errors.md. It serves both directions: the server answers a
// type with its status, and a client types an answer that has no error object
// (a proxy's page) by its status, so the two cannot drift apart.
var errorStatus = []struct {
	typ    string
	status int
}{
	{EInvalidRequest, 400}, // first of 400: what a bare 400 means
	{EInvalidCursor, 400},
	{EUnauthorized, 401},
	{EForbidden, 403},
	{ENotFound, 404},
	{EConflict, 409}, // first of 409
	{ETurnInProgress, 409},
	{EApprovalResolved, 409},
	{ECursorPruned, 410},
	{ECursorStale, 410},
	{EPreconditionFailed, 412},
	{EPayloadTooLarge, 413},
	{EUnsupportedMediaType, 415},
	{EInternal, 500},
	{EUnavailable, 503},
	{EInsufficientStorage, 507},
}

// HTTPStatus is the HTTP status of an error type; 500 for a type not of
// docs/errors.md.
func HTTPStatus(typ string) int {
	for _, e := range errorStatus {
		if e.typ == typ {
			return e.status
		}
	}
	return 500
}

// TypeOfStatus is the error type an HTTP status stands for when the answer
// carries no error object: the first type of that status in docs/errors.md,
// internal for any other status. A 410 is internal too: its cursor types are
// only what they say with the watermarks the error object carries.
func TypeOfStatus(status int) string {
	if status == 410 {
		return EInternal
	}
	for _, e := range errorStatus {
		if e.status == status {
			return e.typ
		}
	}
	return EInternal
}

// ErrAgent is the sandbox.error (and turn.completed error) code of a prompt
// the agent answered with a well-formed JSON-RPC error, such as its model
// API refusing a request: the agent works, the turn failed. The message is
// the agent's own text, sanitized. The other sandbox.error codes, which
// the server tells in its own words, are with the payloads.
const ErrAgent = "agent_error"

// Error is an error of the public vocabulary: a type of docs/errors.md and a message
// written for the person who reads it. Cursor errors also carry the log's
// watermarks so a client can recover.
type Error struct {
	Type    string
	Message string
	// Watermarks, set on cursor_pruned and cursor_stale.
	Marks *Marks
}

// Marks are the watermarks of one sandbox's log.
type Marks struct {
	OldestEventID Seq `json:"oldest_event_id"`
	PrunedThrough Seq `json:"pruned_through"`
	LastEventID   Seq `json:"last_event_id"`
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// Errorf returns an *Error of the given type.
func Errorf(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// ErrorType returns the public type of err: its own for an *Error anywhere in
// the chain, internal for anything else.
func ErrorType(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Type
	}
	return EInternal
}

// IsType reports whether err is an *Error of the given type.
func IsType(err error, typ string) bool { return err != nil && ErrorType(err) == typ }

// CheckCursor applies the cursor rules of docs/stream.md to a resume position after
// of the log of sandbox id: 0 is never refused; below pruned_through is
// cursor_pruned; beyond the last id is cursor_stale. Both carry the marks.
func (m Marks) CheckCursor(id string, after uint64) error {
	if after != 0 && after < uint64(m.PrunedThrough) {
		m := m // a copy made only here, so a cursor that passes allocates nothing
		return &Error{
			Type: ECursorPruned,
			Message: fmt.Sprintf("cursor %d is older than the retained log of sandbox %s (pruned through %d); "+
				"read GET /v1/sandboxes/%s and the events page, then reconnect", after, id, m.PrunedThrough, id),
			Marks: &m,
		}
	}
	if after > uint64(m.LastEventID) {
		m := m
		return &Error{
			Type: ECursorStale,
			Message: fmt.Sprintf("cursor %d is beyond the last event of sandbox %s (%d); it does not come from this log. "+
				"Read GET /v1/sandboxes/%s and the events page, then reconnect", after, id, m.LastEventID, id),
			Marks: &m,
		}
	}
	return nil
}
