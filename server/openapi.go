package server

import (
	_ "embed"
	"net/http"

	"github.com/julienschmidt/httprouter"
)

// openAPIDocument is the OpenAPI 3.1 document of this API. The tests
// validate the server's real answers and events against it and check that
// it names every route of the router, so it cannot drift from the code.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API, as served at
// GET /v1/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }

// openAPI answers the document. It takes the server token like every /v1
// call: a caller without one learns nothing of the API (see notFound), and
// tools that run without a server read server/openapi.json instead.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	writeJSONBytes(w, http.StatusOK, openAPIDocument)
	return nil
}
