package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// internalMessage is all a client learns of an internal error; the detail
// goes to the log under the request id.
const internalMessage = "internal error; the server log has the detail under this request's X-Request-Id"

type errorEnvelope struct {
	Error errorBody `json:"error"`
}

// errorBody is the error object. Cursor errors carry the log's watermarks
// beside type and message, so a client can recover without another call.
type errorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	*sandbox.Marks
}

// writeError answers err: an *sandbox.Error with the status of its type,
// anything else as a logged 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var se *sandbox.Error
	if !errors.As(err, &se) {
		level := slog.LevelError
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client left; nobody reads this answer.
			level = slog.LevelDebug
		}
		if _, ok := errors.AsType[*clientGoneError](err); ok {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "request failed", "request_id", requestID(w),
			"method", r.Method, "path", r.URL.Path, "err", err)
		se = &sandbox.Error{Type: sandbox.EInternal, Message: internalMessage}
	}
	body := errorBody{Type: se.Type, Message: se.Message}
	if se.Type == sandbox.ECursorPruned || se.Type == sandbox.ECursorStale {
		m := sandbox.Marks{}
		if se.Marks != nil {
			m = *se.Marks
		}
		body.Marks = &m
	}
	if se.Type == sandbox.EUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sparkles"`)
	}
	if se.Type == sandbox.EUnavailable {
		// The store comes back on its own; the coordinator retries its
		// writes meanwhile, so a client may try again shortly.
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, sandbox.HTTPStatus(se.Type), errorEnvelope{body})
}

// writeJSON answers v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a programming error gets here: every answer is a plain struct.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"type":"internal","message":"` + internalMessage + `"}}`)
	}
	writeJSONBytes(w, status, append(b, '\n'))
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
