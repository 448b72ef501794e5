package sandbox_test

import (
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestHTTPStatus: each error type of docs/errors.md has its status, and a
// bare status reads back as the first type of it, but for 410.
func TestHTTPStatus(t *testing.T) {
	for _, tt := range []struct {
		typ    string
		status int
		back   string // TypeOfStatus(status)
	}{
		{sandbox.EInvalidRequest, 400, sandbox.EInvalidRequest},
		{sandbox.EInvalidCursor, 400, sandbox.EInvalidRequest},
		{sandbox.EUnauthorized, 401, sandbox.EUnauthorized},
		{sandbox.EForbidden, 403, sandbox.EForbidden},
		{sandbox.ENotFound, 404, sandbox.ENotFound},
		{sandbox.EConflict, 409, sandbox.EConflict},
		{sandbox.ETurnInProgress, 409, sandbox.EConflict},
		{sandbox.EApprovalResolved, 409, sandbox.EConflict},
		{sandbox.ECursorPruned, 410, sandbox.EInternal},
		{sandbox.ECursorStale, 410, sandbox.EInternal},
		{sandbox.EPreconditionFailed, 412, sandbox.EPreconditionFailed},
		{sandbox.EPayloadTooLarge, 413, sandbox.EPayloadTooLarge},
		{sandbox.EUnsupportedMediaType, 415, sandbox.EUnsupportedMediaType},
		{sandbox.EInternal, 500, sandbox.EInternal},
		{sandbox.EUnavailable, 503, sandbox.EUnavailable},
		{sandbox.EInsufficientStorage, 507, sandbox.EInsufficientStorage},
		{"no_such_type", 500, sandbox.EInternal},
	} {
		if got, want := sandbox.HTTPStatus(tt.typ), tt.status; got != want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", tt.typ, got, want)
		}
		if got, want := sandbox.TypeOfStatus(tt.status), tt.back; got != want {
			t.Errorf("TypeOfStatus(%d) = %q, want %q", tt.status, got, want)
		}
	}
	for _, status := range []int{200, 302, 405, 429, 502, 504} {
		if got, want := sandbox.TypeOfStatus(status), sandbox.EInternal; got != want {
			t.Errorf("TypeOfStatus(%d) = %q, want %q", status, got, want)
		}
	}
}
