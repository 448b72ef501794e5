package coordinator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// maxInputBlocks bounds the blocks of one turn's input.
const maxInputBlocks = 64

// imageTypes are the media types an image block may have: those the model
// APIs behind the agents take.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

func (c *Coordinator) imageMax() int64 {
	if c.cfg.TurnImageMax > 0 {
		return c.cfg.TurnImageMax
	}
	return sandbox.DefaultTurnImageMax
}

// StartTurnInput is StartTurn (or, with queue, QueueTurn) for an input of
// blocks: text, images and files of the workspace (docs/api.md).
func (c *Coordinator) StartTurnInput(ctx context.Context, id string, input []sandbox.InputBlock, queue bool) (sandbox.Turn, error) {
	if err := c.checkBlocks(input); err != nil {
		return sandbox.Turn{}, err
	}
	return callAs[sandbox.Turn](ctx, c, cluster.Call{Op: cluster.OpStartTurn, SandboxID: id, Blocks: input, Queue: queue})
}

// checkBlocks checks what it can of blocks without the workspace or the
// agent: their types, media types, base64 and sizes.
func (c *Coordinator) checkBlocks(in []sandbox.InputBlock) error {
	_, err := c.blockSizes(in)
	return err
}

// blockSizes checks a turn's blocks (checkBlocks) and returns the decoded
// size of each image, 0 for the other blocks.
func (c *Coordinator) blockSizes(in []sandbox.InputBlock) ([]int64, error) {
	if len(in) == 0 {
		return nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" must be a non-empty string or a non-empty list of blocks`)
	}
	if len(in) > maxInputBlocks {
		return nil, sandbox.Errorf(sandbox.EInvalidRequest, `"input" has %d blocks; at most %d are taken`, len(in), maxInputBlocks)
	}
	sizes := make([]int64, len(in))
	for i, b := range in {
		switch b.Type {
		case "text":
			if strings.TrimSpace(b.Text) == "" {
				return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: a text block needs a non-empty "text"`, i)
			}
		case "image":
			if !imageTypes[b.MediaType] {
				return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: "media_type" %q is not one of image/png, image/jpeg, image/gif, image/webp`, i, b.MediaType)
			}
			if max := c.imageMax(); int64(base64.StdEncoding.DecodedLen(len(b.Data))) > max+2 {
				return nil, sandbox.Errorf(sandbox.EPayloadTooLarge, "input[%d]: the image is larger than %d bytes (--turn-image-max-size)", i, max)
			}
			n, err := decodedLen(b.Data)
			if err != nil {
				return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: "data" is not standard base64: %v`, i, err)
			}
			if n == 0 {
				return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: an image block needs its "data"`, i)
			}
			if max := c.imageMax(); n > max {
				return nil, sandbox.Errorf(sandbox.EPayloadTooLarge, "input[%d]: the image is %d bytes, more than the %d of --turn-image-max-size", i, n, max)
			}
			sizes[i] = n
		case "file":
			if b.Path == "" {
				return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: a file block needs a "path" in the workspace`, i)
			}
		default:
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, `input[%d]: "type" must be "text", "image" or "file", not %q`, i, b.Type)
		}
	}
	return sizes, nil
}

// decodedLen checks that data is standard base64 and returns the size it
// decodes to, without holding the decoded bytes (an image may be MiBs).
func decodedLen(data string) (int64, error) {
	return io.Copy(io.Discard, base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
}

// attach turns a turn's input into the prompt the agent gets and the
// input the log records: an image by its media type and size, never its
// data; a file by its path in the workspace, read now, so the agent gets
// the file as it was when the turn was accepted. Text alone (blocks nil)
// is sent as it is, with no prompt of blocks. The blocks are checked
// again here, for a call forwarded from another node. An agent already
// running that does not take a block refuses it here; one not yet booted,
// when the turn runs (promptFor).
func (b *box) attach(text string, blocks []sandbox.InputBlock) ([]agent.Block, []sandbox.Input, error) {
	if blocks == nil {
		return nil, sandbox.TextInput(text), nil
	}
	sizes, err := b.c.blockSizes(blocks)
	if err != nil {
		return nil, nil, err
	}
	prompt := make([]agent.Block, 0, len(blocks))
	input := make([]sandbox.Input, 0, len(blocks))
	var ws *workspace.Workspace
	defer func() {
		if ws != nil {
			ws.Close()
		}
	}()
	for i, x := range blocks {
		switch x.Type {
		case "text":
			prompt = append(prompt, agent.Block{Type: "text", Text: x.Text})
			input = append(input, sandbox.Input{Type: "text", Text: x.Text})
		case "image":
			prompt = append(prompt, agent.Block{Type: "image", MimeType: x.MediaType, Data: x.Data})
			input = append(input, sandbox.Input{Type: "image", MediaType: x.MediaType, Bytes: sizes[i]})
		case "file":
			if ws == nil {
				if b.c.cfg.DataDir == "" {
					return nil, nil, sandbox.Errorf(sandbox.EInvalidRequest, "input[%d]: this server keeps no workspaces, so a turn takes no files", i)
				}
				if b.c.cloning(b.id) {
					return nil, nil, sandbox.Errorf(sandbox.EConflict, "input[%d]: sandbox %s is cloning its repository; its files are there once it is ready", i, b.id)
				}
				var err error
				if ws, err = workspace.Open(b.workDir(), workspace.Options{Log: b.log()}); err != nil {
					return nil, nil, err
				}
			}
			blk, rel, err := b.readAttachment(ws, x.Path)
			if err != nil {
				return nil, nil, inputErr(i, err)
			}
			prompt = append(prompt, blk)
			input = append(input, sandbox.Input{Type: "file", Path: rel})
		}
	}
	if b.conn != nil {
		if _, err := promptAs(b.conn.Capabilities(), b.agentName(), prompt); err != nil {
			return nil, nil, err
		}
	}
	return prompt, input, nil
}

// inputErr names block i in err. A file missing or unreadable is a bad
// request, like any other block that cannot be sent.
func inputErr(i int, err error) error {
	var se *sandbox.Error
	if !errors.As(err, &se) {
		return err
	}
	typ := se.Type
	if typ == sandbox.ENotFound || typ == sandbox.EForbidden {
		typ = sandbox.EInvalidRequest
	}
	return sandbox.Errorf(typ, "input[%d]: %s", i, se.Message)
}

func (b *box) workDir() string { return b.dir().Work() }

// readAttachment reads the file at p of the workspace (os.Root: no path
// out of it, no symbolic link out of it) as an embedded resource.
func (b *box) readAttachment(ws *workspace.Workspace, p string) (agent.Block, string, error) {
	f, err := ws.ReadFile(p)
	if err != nil {
		return agent.Block{}, "", err
	}
	defer f.Close()
	max := b.c.imageMax()
	if f.Size > max {
		return agent.Block{}, "", sandbox.Errorf(sandbox.EPayloadTooLarge, "file %q is %d bytes, more than the %d of --turn-image-max-size", p, f.Size, max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return agent.Block{}, "", fmt.Errorf("read %q: %w", p, err)
	}
	if int64(len(data)) > max {
		return agent.Block{}, "", sandbox.Errorf(sandbox.EPayloadTooLarge, "file %q is more than the %d bytes of --turn-image-max-size", p, max)
	}
	res := &agent.EmbeddedResource{URI: "file://" + filepath.Join(b.workDir(), filepath.FromSlash(f.Path)), MimeType: f.ContentType}
	if utf8.Valid(data) {
		res.Text = string(data)
		if strings.HasPrefix(res.MimeType, "application/octet-stream") {
			res.MimeType = "text/plain"
		}
	} else {
		res.Blob = base64.StdEncoding.EncodeToString(data)
	}
	return agent.Block{Type: "resource", Resource: res}, f.Path, nil
}

// promptAs is prompt as an agent with caps takes it, or invalid_request
// for the first block its promptCapabilities do not allow. A file is
// never refused: an agent without embeddedContext gets it as a
// resource_link, which every agent takes.
func promptAs(caps agent.Capabilities, agentName string, prompt []agent.Block) ([]agent.Block, error) {
	out := make([]agent.Block, len(prompt))
	for i, p := range prompt {
		switch {
		case p.Type == "image" && !caps.Image:
			return nil, sandbox.Errorf(sandbox.EInvalidRequest, "agent %s does not accept images (promptCapabilities.image)", agentName)
		case p.Type == "resource" && !caps.EmbeddedContext:
			p = agent.Block{Type: "resource_link", URI: p.Resource.URI, Name: path.Base(p.Resource.URI), MimeType: p.Resource.MimeType}
		}
		out[i] = p
	}
	return out, nil
}

func (b *box) agentName() string {
	if sb, err := b.c.store.Sandbox(b.c.ctx, b.id); err == nil {
		return fmt.Sprintf("%q", sb.Agent)
	}
	return "of this sandbox"
}

// promptFor is the prompt of turn t for the running agent, or the error its
// turn fails with when the agent, booted after the turn was accepted,
// does not take a block of it.
func (b *box) promptFor(t *turnRun) ([]agent.Block, *sandbox.ErrorInfo) {
	if t.prompt == nil {
		return []agent.Block{{Type: "text", Text: t.text}}, nil
	}
	prompt, err := promptAs(b.conn.Capabilities(), b.agentName(), t.prompt)
	if err != nil {
		var se *sandbox.Error
		errors.As(err, &se)
		return nil, &sandbox.ErrorInfo{Code: sandbox.ErrInputUnsupported, Message: se.Message}
	}
	return prompt, nil
}
