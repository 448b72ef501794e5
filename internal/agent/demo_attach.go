package agent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// DemoNoAttachmentsEnv, set to 1 in the demo agent's environment, makes
// it advertise no prompt capabilities beyond text, so that a turn with an
// image is refused as by an agent that takes none.
const DemoNoAttachmentsEnv = "SPARKLES_DEMO_NO_ATTACHMENTS"

// promptCaps are the demo's promptCapabilities: images and embedded
// resources, unless its environment says DemoNoAttachmentsEnv=1.
func (d *demo) promptCaps() map[string]bool {
	on := true
	for _, kv := range d.env {
		if kv == DemoNoAttachmentsEnv+"=1" {
			on = false
		}
	}
	return map[string]bool{"image": on, "audio": false, "embeddedContext": on}
}

// demoAttachment describes a prompt block other than text, as the demo's
// reply tells of it: "image image/png 68 bytes", "resource file:///…
// 12 bytes", "resource_link file:///…". Text blocks say nothing.
func demoAttachment(raw json.RawMessage) string {
	var b Block
	if json.Unmarshal(raw, &b) != nil {
		return ""
	}
	switch b.Type {
	case "image":
		n, _ := base64.StdEncoding.DecodeString(b.Data)
		return fmt.Sprintf("image %s %d bytes", b.MimeType, len(n))
	case "resource":
		if b.Resource == nil {
			return "resource without contents"
		}
		n := len(b.Resource.Text)
		if b.Resource.Blob != "" {
			raw, _ := base64.StdEncoding.DecodeString(b.Resource.Blob)
			n = len(raw)
		}
		return fmt.Sprintf("resource %s %d bytes", b.Resource.URI, n)
	case "resource_link":
		return "resource_link " + b.URI
	}
	return ""
}

// attachedText is the sentence of a reply that lists a prompt's attachments.
func attachedText(list []string) string {
	return "Attached: " + strings.Join(list, "; ") + "."
}
