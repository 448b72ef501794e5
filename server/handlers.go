package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Page sizes of docs/api.md.
const (
	defaultSandboxPage = 20
	maxSandboxPage     = 100
	defaultEventPage   = 100
	maxEventPage       = 1000
)

// createdSandbox is the create answer: the sandbox and, this once, the
// token that reads it.
type createdSandbox struct {
	sandbox.Sandbox
	StreamToken string `json:"stream_token"`
}

// MarshalJSON writes the sandbox and then the token: the embedded Sandbox's
// own MarshalJSON would otherwise be the whole answer.
func (c createdSandbox) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(c.Sandbox)
	if err != nil {
		return nil, err
	}
	return sandbox.AppendObjectField(b, "stream_token", c.StreamToken)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	var p sandbox.CreateParams
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	sb, err := s.b.CreateSandbox(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, createdSandbox{sb, StreamToken(s.cfg.Token, sb.ID)})
	return nil
}

type sandboxList struct {
	Object  string            `json:"object"`
	Data    []sandbox.Sandbox `json:"data"`
	HasMore bool              `json:"has_more"`
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	limit, err := queryLimit(r, defaultSandboxPage, maxSandboxPage)
	if err != nil {
		return err
	}
	list, more, err := s.store.Sandboxes(r.Context(), r.URL.Query().Get("after"), limit)
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.Sandbox{}
	}
	writeJSON(w, http.StatusOK, sandboxList{Object: "list", Data: list, HasMore: more})
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	sb, err := s.store.Sandbox(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	sb, err := s.b.DeleteSandbox(r.Context(), ps.ByName("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

// patchRequest is the body of PATCH /v1/sandboxes/{id}: the agent config
// is all of a sandbox that changes after create.
type patchRequest struct {
	Config *sandbox.ConfigChange `json:"config"`
}

func (s *Server) patchSandbox(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	var req patchRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Config == nil {
		return sandbox.Errorf(sandbox.EInvalidRequest, "config is required: {\"config\": {\"mode\": …, \"model\": …}}")
	}
	sb, err := s.b.SetConfig(r.Context(), ps.ByName("id"), *req.Config)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

type turnRequest struct {
	// Input is the prompt text, or a list of blocks (docs/api.md).
	Input json.RawMessage `json:"input"`
	// Queue lets the turn wait behind the open one instead of being
	// refused (docs/api.md).
	Queue bool `json:"queue"`
}

func (s *Server) startTurn(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	var req turnRequest
	if err := decodeBodyMax(w, r, &req, s.turnBodyMax()); err != nil {
		return err
	}
	text, blocks, err := turnInput(req.Input)
	if err != nil {
		return err
	}
	start := s.b.StartTurn
	if req.Queue {
		start = s.b.QueueTurn
	}
	var t sandbox.Turn
	if blocks != nil {
		t, err = s.b.StartTurnInput(r.Context(), ps.ByName("id"), blocks, req.Queue)
	} else {
		t, err = start(r.Context(), ps.ByName("id"), text)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, t)
	return nil
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	t, err := s.b.Turn(r.Context(), ps.ByName("id"), ps.ByName("turn_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) cancelTurn(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	// No body is needed; one that is sent must still be a valid, empty
	// object, so a client's mistake does not pass silently.
	if err := decodeBody(w, r, &struct{}{}); err != nil {
		return err
	}
	t, err := s.b.CancelTurn(r.Context(), ps.ByName("id"), ps.ByName("turn_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, t)
	return nil
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	var d sandbox.Decision
	if err := decodeBody(w, r, &d); err != nil {
		return err
	}
	switch {
	case d.Decision == "" && d.OptionID == "":
		return sandbox.Errorf(sandbox.EInvalidRequest, `send either "decision" ("approve" or "deny") or "option_id"`)
	case d.Decision != "" && d.OptionID != "":
		return sandbox.Errorf(sandbox.EInvalidRequest, `send "decision" or "option_id", not both`)
	case d.Decision != "" && d.Decision != "approve" && d.Decision != "deny":
		return sandbox.Errorf(sandbox.EInvalidRequest, `"decision" must be "approve" or "deny", not %q`, d.Decision)
	}
	a, err := s.b.Decide(r.Context(), ps.ByName("id"), ps.ByName("approval_id"), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// eventsPage answers a page of the log. The records' JSON goes out as the
// store encoded it; only the list around it is written here.
func (s *Server) eventsPage(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	id := ps.ByName("id")
	since, _, err := cursorOf(r)
	if err != nil {
		return err
	}
	limit, err := queryLimit(r, defaultEventPage, maxEventPage)
	if err != nil {
		return err
	}
	// One more than asked tells whether another page follows.
	recs, err := s.store.Read(r.Context(), id, since, limit+1)
	if err != nil {
		return err
	}
	more := len(recs) > limit
	if more {
		recs = recs[:limit]
	}
	// The watermarks are taken after the read, so last_event_id is never
	// below an id of the page.
	sb, err := s.store.Sandbox(r.Context(), id)
	if err != nil {
		return err
	}
	next := since
	if len(recs) > 0 {
		next = recs[len(recs)-1].ID
	}
	// A store may answer fewer events than asked while more are there (Read
	// promises "up to limit"); the log's last id settles it.
	more = more || len(recs) > 0 && next < uint64(sb.LastEventID)
	size := 160
	for _, rec := range recs {
		size += len(rec.JSON) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, `{"object":"list","data":[`...)
	for i, rec := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, rec.JSON...)
	}
	b = append(b, `],"has_more":`...)
	b = strconv.AppendBool(b, more)
	b = appendSeqField(b, "next_since", next)
	b = appendSeqField(b, "oldest_event_id", uint64(sb.OldestEventID))
	b = appendSeqField(b, "last_event_id", uint64(sb.LastEventID))
	b = append(b, "}\n"...)
	writeJSONBytes(w, http.StatusOK, b)
	return nil
}

func appendSeqField(b []byte, name string, v uint64) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = strconv.AppendUint(b, v, 10)
	return append(b, '"')
}

// turnInput reads a turn's "input": a non-empty string, answered as text,
// or a non-empty list of blocks, checked by the coordinator. Beyond the
// data of its images, it has the size limit of any body.
func turnInput(raw json.RawMessage) (string, []sandbox.InputBlock, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) > maxBodyBytes && raw[0] != '[' {
		return "", nil, sandbox.Errorf(sandbox.EPayloadTooLarge, "request body is larger than %d bytes", maxBodyBytes)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" is required: the prompt text of the turn, or a list of blocks`)
	}
	if raw[0] == '[' {
		var blocks []sandbox.InputBlock
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&blocks); err != nil {
			return "", nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" is not a list of blocks {type, text | media_type, data | path}: %v`, err)
		}
		if len(blocks) == 0 {
			return "", nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" is an empty list; send at least one block`)
		}
		// Only images have the room of turnBodyImages: the rest keeps the
		// limit of any body.
		rest := len(raw)
		for _, b := range blocks {
			rest -= len(b.Data)
		}
		if rest > maxBodyBytes {
			return "", nil, sandbox.Errorf(sandbox.EPayloadTooLarge, "request body is larger than %d bytes besides its images", maxBodyBytes)
		}
		return "", blocks, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" must be a string or a list of blocks`)
	}
	if strings.TrimSpace(text) == "" {
		return "", nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" is required: the prompt text of the turn, or a list of blocks`)
	}
	return text, nil, nil
}

// turnBodyMax is the body limit of a turn: room for turnBodyImages
// images of the largest size in base64, besides the usual 1 MiB.
func (s *Server) turnBodyMax() int64 {
	img := s.cfg.TurnImageMax
	if img <= 0 {
		img = sandbox.DefaultTurnImageMax
	}
	return maxBodyBytes + turnBodyImages*((img+2)/3*4)
}
