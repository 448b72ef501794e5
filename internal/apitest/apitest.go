// Package apitest checks real answers and SSE frames of a Sparkles server
// against the OpenAPI document of its API (server/openapi.json), so that
// tests keep the document and the server in step. It wraps the validator
// library (libopenapi-validator) behind the few calls those tests make.
//
// The document leaves answer schemas open (clients must ignore fields they
// do not know, so the server may add some within v1); Closed closes them for
// the tests, so that a field the server sends without the document naming
// it fails a test as surely as a missing one.
package apitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// StreamPath and FrameExtension locate, in the document, the schema of an
// SSE frame's data: the text/event-stream media type of the stream names
// it in an extension, since OpenAPI 3.1 has no field for it.
const (
	StreamPath     = "/v1/sandboxes/{id}/events/stream"
	FrameExtension = "x-sparkles-frame-data"
)

// Spec is a loaded document and its validators.
type Spec struct {
	raw    map[string]any
	model  *v3.Document
	v      validator.Validator
	sv     schema_validation.SchemaValidator
	frame  *base.Schema
	schema map[string]*base.Schema
}

// Load parses and builds the document: every $ref must resolve, and the
// document must be valid OpenAPI 3.1 by the specification's own schema.
func Load(doc []byte) (*Spec, error) {
	var raw map[string]any
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("openapi: not JSON: %w", err)
	}
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	if v := d.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("openapi: version %q, want 3.1.x", v)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("openapi: build model: %w", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi: validator: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("openapi: the document is not valid OpenAPI 3.1: %s", joinErrors(verrs))
	}
	s := &Spec{raw: raw, model: &m.Model, v: v, sv: schema_validation.NewSchemaValidator(), schema: map[string]*base.Schema{}}
	if m.Model.Components != nil && m.Model.Components.Schemas != nil {
		for name, proxy := range m.Model.Components.Schemas.FromOldest() {
			s.schema[name] = proxy.Schema()
		}
	}
	// The extension is looked for on every media type of the answer, so
	// that a document which gives the stream another media type loads and
	// then fails on the stream's real Content-Type.
	var ref string
	content, _ := lookup(raw, "paths", StreamPath, "get", "responses", "200", "content").(map[string]any)
	for _, mt := range content {
		if r, ok := lookup(mt, FrameExtension).(string); ok {
			ref = r
		}
	}
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if s.frame = s.schema[name]; !ok || s.frame == nil {
		return nil, fmt.Errorf("openapi: the stream's media type names no frame schema in %s (%q)", FrameExtension, ref)
	}
	return s, nil
}

// Raw returns the document as decoded JSON, to read what the model does
// not expose plainly (paths and methods as written).
func (s *Spec) Raw() map[string]any { return s.raw }

// Operations returns every "METHOD path" of the document.
func (s *Spec) Operations() []string {
	var out []string
	paths, _ := s.raw["paths"].(map[string]any)
	for p, item := range paths {
		ops, _ := item.(map[string]any)
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Judgement says what the document must make of a request.
type Judgement int

const (
	// Accepted: the document accepts the request; request and answer are
	// both validated.
	Accepted Judgement = iota
	// Refused: the server refused the request and the document must
	// refuse it too (an unknown field, a malformed cursor, no token); the
	// answer is validated.
	Refused
	// Unjudged: the document cannot tell (a body over 1 MiB, a stream
	// token on a route for the server token only); the answer is validated.
	Unjudged
)

// Exchange is one request and its answer, kept whole so that it can be
// validated again against another document.
type Exchange struct {
	Name     string
	Judge    Judgement
	Method   string
	URL      string
	Header   http.Header
	Body     []byte
	Status   int
	RHeader  http.Header
	RBody    []byte
	Streamed bool // a text/event-stream answer: its body is not kept
}

func (e *Exchange) request() *http.Request {
	req, err := http.NewRequest(e.Method, e.URL, bytes.NewReader(e.Body))
	if err != nil {
		panic(err) // the URL was requested once already
	}
	req.Header = e.Header.Clone()
	if len(e.Body) == 0 {
		req.Body = http.NoBody
	}
	return req
}

func (e *Exchange) response(req *http.Request) *http.Response {
	return &http.Response{
		StatusCode: e.Status,
		Header:     e.RHeader.Clone(),
		Body:       io.NopCloser(bytes.NewReader(e.RBody)),
		Request:    req,
	}
}

// Check validates one exchange and returns what the document finds wrong
// with it.
func (s *Spec) Check(e *Exchange) error {
	req := e.request()
	var problems []string
	ok, verrs := s.v.ValidateHttpResponse(req, e.response(req))
	if !ok {
		problems = append(problems, "answer: "+joinErrors(verrs))
	}
	switch e.Judge {
	case Accepted:
		if ok, verrs := s.v.ValidateHttpRequest(e.request()); !ok {
			problems = append(problems, "request: "+joinErrors(verrs))
		}
	case Refused:
		if ok, _ := s.v.ValidateHttpRequest(e.request()); ok {
			problems = append(problems, fmt.Sprintf("request: the server refused it with %d, the document accepts it", e.Status))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s %s -> %d %s: %s", e.Name, e.Method, e.URL, e.Status, truncate(e.RBody), strings.Join(problems, "; "))
	}
	return nil
}

// CheckSchema validates a JSON value against a schema of the components,
// for answers that no operation describes (a wrong method, a path the
// router does not know).
func (s *Spec) CheckSchema(name string, data []byte) error {
	sch := s.schema[name]
	if sch == nil {
		return fmt.Errorf("the document has no schema %s", name)
	}
	if ok, verrs := s.sv.ValidateSchemaBytes(sch, data); !ok {
		return fmt.Errorf("%s: %s: %s", name, truncate(data), joinErrors(verrs))
	}
	return nil
}

// Frame is one SSE message as a plain reader parses it.
type Frame struct {
	ID    string
	HasID bool
	Event string
	Data  []byte
}

// CheckFrame validates a frame: its data against the frame schema the
// stream's media type names, and its fields against docs/stream.md: the event
// name is the type, a durable event's id line is its id, a transient one
// has no id line at all.
func (s *Spec) CheckFrame(f Frame) error {
	if ok, verrs := s.sv.ValidateSchemaBytes(s.frame, f.Data); !ok {
		return fmt.Errorf("frame %q: %s: %s", f.Event, truncate(f.Data), joinErrors(verrs))
	}
	var env struct {
		ID   *string `json:"id"`
		Type string  `json:"type"`
	}
	if err := json.Unmarshal(f.Data, &env); err != nil {
		return fmt.Errorf("frame %q: %w", f.Event, err)
	}
	switch {
	case f.Event != env.Type:
		return fmt.Errorf("frame: event %q carries a %q envelope", f.Event, env.Type)
	case env.ID == nil && f.HasID:
		return fmt.Errorf("frame %q: a transient frame with an id line %q", f.Event, f.ID)
	case env.ID != nil && (!f.HasID || f.ID != *env.ID):
		return fmt.Errorf("frame %q: id line %q (present %v) for event id %s", f.Event, f.ID, f.HasID, *env.ID)
	}
	return nil
}

// Closed returns the document with every object schema that lists
// properties, and says nothing of others, closed to other properties.
func Closed(doc []byte) ([]byte, error) {
	return Mutated(doc, func(d map[string]any) { closeObjects(d) })
}

func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			_, open := v["additionalProperties"]
			_, uneval := v["unevaluatedProperties"]
			if !open && !uneval {
				v["additionalProperties"] = false
			}
			for _, p := range props {
				closeObjects(p)
			}
		}
		for k, c := range v {
			if k != "properties" {
				closeObjects(c)
			}
		}
	case []any:
		for _, c := range v {
			closeObjects(c)
		}
	}
}

// Mutated returns a copy of the document changed by f, for the tests that
// prove a wrong document fails.
func Mutated(doc []byte, f func(d map[string]any)) ([]byte, error) {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	f(d)
	return json.MarshalIndent(d, "", "  ")
}

// Lookup walks decoded JSON by object keys; nil when a key is missing.
func Lookup(v any, keys ...string) any { return lookup(v, keys...) }

func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func joinErrors[E error](errs []E) string {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return strings.Join(s, " | ")
}

func truncate(b []byte) string {
	const max = 600
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
