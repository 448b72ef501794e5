package server

import (
	"net/http"

	"github.com/julienschmidt/httprouter"
)

// checkAgent answers GET /v1/agents/:name/check: the agent booted as a
// sandbox of it would be, in a throwaway sandbox, step by step. An agent
// that does not start is a 200 with ready false: the check worked. Only the
// full token may ask, as the answer names the command and its paths.
func (s *Server) checkAgent(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	ch, err := s.b.CheckAgent(r.Context(), ps.ByName("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ch)
	return nil
}
