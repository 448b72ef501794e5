package server

import (
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

type agentList struct {
	Object string          `json:"object"`
	Data   []sandbox.Agent `json:"data"`
}

// listAgents answers GET /v1/agents: the agents a sandbox may ask for and
// whether each can start here. Commands and env stay on the server: they
// may name paths and hold keys.
func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	list, err := s.b.Agents(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.Agent{}
	}
	writeJSON(w, http.StatusOK, agentList{Object: "list", Data: list})
	return nil
}
