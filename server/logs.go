package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// getLogs answers a sandbox's agent log (what its agent wrote to stderr)
// as text, redacted like every string that leaves the server: the rotated
// file first, then the current one. ?tail=N starts at the last N lines;
// ?follow=true goes on with what the agent writes until the client leaves.
// Full token only: an agent's output is for the people who run it, not
// for a page that holds a stream token.
func (s *Server) getLogs(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	q := r.URL.Query()
	o := sandbox.LogOptions{Tail: -1}
	if q.Has("tail") {
		v := q.Get("tail")
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return sandbox.Errorf(sandbox.EInvalidRequest, "tail %q must be a number of lines, 0 or more", v)
		}
		o.Tail = n
	}
	if q.Has("follow") {
		v := q.Get("follow")
		f, err := strconv.ParseBool(v)
		if err != nil {
			return sandbox.Errorf(sandbox.EInvalidRequest, "follow %q must be true or false", v)
		}
		o.Follow = f
	}
	id := ps.ByName("id")
	l, err := s.b.AgentLog(r.Context(), id)
	if err != nil {
		return err
	}
	h := w.Header()
	// An agent's output is never a page of the console's origin.
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	if o.Follow {
		h.Set("X-Accel-Buffering", "no")
		o.Flush = http.NewResponseController(w).Flush
	}
	w.WriteHeader(http.StatusOK)
	// A follow ends when the client leaves or the server shuts down.
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	defer context.AfterFunc(s.ctx, stop)()
	if err := l.Copy(ctx, w, o); err != nil && ctx.Err() == nil {
		// The headers are out: only a cut answer can tell the client.
		s.log.Warn("agent log cut short", "request_id", requestID(w), "sandbox_id", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}
