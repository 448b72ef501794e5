package agent

// Block is one ACP content block of a prompt: text, an image (base64 Data
// with its MimeType), a resource_link (URI and Name), or an embedded
// resource. Which of them an agent takes beyond text and resource_link it
// says in its promptCapabilities (Capabilities).
type Block struct {
	Type     string            `json:"type"`
	Text     string            `json:"text,omitempty"`
	MimeType string            `json:"mimeType,omitempty"`
	Data     string            `json:"data,omitempty"`
	URI      string            `json:"uri,omitempty"`
	Name     string            `json:"name,omitempty"`
	Resource *EmbeddedResource `json:"resource,omitempty"`
}

// EmbeddedResource is the resource of an embedded resource block: a file's
// contents as Text, or as base64 Blob when it is not UTF-8 text.
type EmbeddedResource struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// PromptBlocks is Prompt with a prompt of content blocks.
func (c *Conn) PromptBlocks(turnID string, blocks []Block) error {
	id, err := c.register(&call{prompt: true, turnID: turnID})
	if err != nil {
		return err
	}
	err = c.write(request{JSONRPC: "2.0", ID: id, Method: "session/prompt", Params: promptParams{
		SessionID: c.sessionID(),
		Prompt:    blocks,
	}})
	if err != nil {
		c.unregister(id)
		return err
	}
	return nil
}
