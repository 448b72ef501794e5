package e2e

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// image sends a turn of text and a PNG. The turn succeeds; turn.started
// records the image by its type and size, no event holds its data; the
// demo's reply describes it, and a real adapter's model request holds it
// as an image content block with the media type and data sent.
func (s *scenarioRun) image() {
	s.t.Helper()
	if !s.a.images {
		s.t.Skip("the adapter's row says it takes no images")
	}
	var turn sandbox.Turn
	s.p.mustCall(http.MethodPost, "/v1/sandboxes/"+s.id+"/turns", map[string]any{"input": []sandbox.InputBlock{
		{Type: "text", Text: "hello, what is in this picture?"},
		{Type: "image", MediaType: "image/png", Data: pngData},
	}}, http.StatusAccepted, &turn)
	s.wantStatus(s.completed(turn.ID), sandbox.TurnSucceeded)
	var started sandbox.TurnStarted
	mustDecode(s.t, s.rec.first(turn.ID, sandbox.TypeTurnStarted), &started)
	if len(started.Input) != 2 || started.Input[1] != (sandbox.Input{Type: "image", MediaType: "image/png", Bytes: 68}) {
		s.t.Errorf("turn.started input %+v, want the text and {image image/png 68}", started.Input)
	}
	for _, typ := range []sandbox.Type{sandbox.TypeTurnStarted, sandbox.TypeMessageUpdated, sandbox.TypeMessageCompleted} {
		for _, f := range s.rec.of(turn.ID, typ) {
			if strings.Contains(string(f.data), pngData[:40]) {
				s.t.Errorf("%s holds the image's data", typ)
			}
		}
	}
	if s.a.script == nil {
		var text strings.Builder
		for _, f := range s.rec.of(turn.ID, sandbox.TypeMessageUpdated) {
			var d sandbox.MessageUpdated
			mustDecode(s.t, f, &d)
			text.WriteString(d.Text)
		}
		if !strings.Contains(text.String(), "image image/png 68 bytes") {
			s.t.Errorf("the demo's reply does not describe the image: %q", text.String())
		}
		return
	}
	for _, r := range s.a.script.Requests() {
		if !r.Side && hasImageBlock(r.Body, "image/png", pngData) {
			return
		}
	}
	s.t.Errorf("no request to the model holds an image block of image/png with the data sent; agent log:\n%s", s.agentLog())
}

// hasImageBlock reports whether a Messages API request body holds an
// image content block {type: image, source: {type: base64, media_type,
// data}} with mediaType and data.
func hasImageBlock(body []byte, mediaType, data string) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			if x["type"] == "image" {
				if src, ok := x["source"].(map[string]any); ok && src["media_type"] == mediaType && src["data"] == data {
					return true
				}
			}
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
