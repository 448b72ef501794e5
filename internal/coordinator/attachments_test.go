package coordinator

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestCheckBlocks(t *testing.T) {
	c := &Coordinator{cfg: Config{TurnImageMax: 10}}
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for _, tc := range []struct {
		name   string
		blocks []sandbox.InputBlock
		typ    string // "" for no error
		want   string
	}{
		{"OK", []sandbox.InputBlock{{Type: "text", Text: "hi"}, {Type: "image", MediaType: "image/webp", Data: b64(10)}, {Type: "file", Path: "a.txt"}}, "", ""},
		{"Empty", nil, sandbox.EInvalidRequest, "non-empty"},
		{"EmptyText", []sandbox.InputBlock{{Type: "text", Text: " "}}, sandbox.EInvalidRequest, `input[0]: a text block`},
		{"BadBase64", []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: "@@@@"}}, sandbox.EInvalidRequest, "base64"},
		{"NoData", []sandbox.InputBlock{{Type: "image", MediaType: "image/png"}}, sandbox.EInvalidRequest, `"data"`},
		{"MediaType", []sandbox.InputBlock{{Type: "text", Text: "x"}, {Type: "image", MediaType: "image/svg+xml", Data: b64(1)}}, sandbox.EInvalidRequest, `input[1]: "media_type" "image/svg+xml"`},
		{"TooLarge", []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: b64(11)}}, sandbox.EPayloadTooLarge, "--turn-image-max-size"},
		{"FarTooLarge", []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: b64(1000)}}, sandbox.EPayloadTooLarge, "--turn-image-max-size"},
		{"NoPath", []sandbox.InputBlock{{Type: "file"}}, sandbox.EInvalidRequest, `"path"`},
		{"Type", []sandbox.InputBlock{{Type: "audio"}}, sandbox.EInvalidRequest, `not "audio"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.checkBlocks(tc.blocks)
			if tc.typ == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !sandbox.IsType(err, tc.typ) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %s naming %s", err, tc.typ, tc.want)
			}
		})
	}
}

// TestPromptAs: an agent without embeddedContext gets a file as a
// resource_link; one without images refuses an image, naming the
// capability.
func TestPromptAs(t *testing.T) {
	prompt := []agent.Block{
		{Type: "text", Text: "look"},
		{Type: "resource", Resource: &agent.EmbeddedResource{URI: "file:///w/docs/a.txt", MimeType: "text/plain", Text: "hi"}},
	}
	got, err := promptAs(agent.Capabilities{EmbeddedContext: true}, `"x"`, prompt)
	if err != nil || got[1].Type != "resource" || got[1].Resource.Text != "hi" {
		t.Fatalf("with embeddedContext: %+v, %v", got, err)
	}
	got, err = promptAs(agent.Capabilities{}, `"x"`, prompt)
	if err != nil || got[1] != (agent.Block{Type: "resource_link", URI: "file:///w/docs/a.txt", Name: "a.txt", MimeType: "text/plain"}) {
		t.Fatalf("without embeddedContext: %+v, %v", got, err)
	}
	if prompt[1].Type != "resource" {
		t.Fatal("promptAs changed its argument")
	}
	_, err = promptAs(agent.Capabilities{EmbeddedContext: true}, `"x"`, append(prompt, agent.Block{Type: "image", MimeType: "image/png", Data: "AA=="}))
	if !sandbox.IsType(err, sandbox.EInvalidRequest) || !strings.Contains(err.Error(), `agent "x" does not accept images (promptCapabilities.image)`) {
		t.Fatalf("image without the capability: %v", err)
	}
}
