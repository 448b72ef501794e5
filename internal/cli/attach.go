package cli

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// attachFlags are prompt's flags for the blocks of a turn besides its text.
func attachFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "image", EnvVars: []string{"SPARKLES_PROMPT_IMAGE"}, Usage: "send this local image (png, jpeg, gif or webp) with the prompt (repeatable)"},
		&cli.StringSliceFlag{Name: "file", EnvVars: []string{"SPARKLES_PROMPT_FILE"}, Usage: "send this file of the sandbox's workspace, a path relative to it, with the prompt (repeatable)"},
	}
}

// imageTypes are the media types a turn's image may have, by extension.
var imageTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}

// attachBlocks is the input of a prompt with --image or --file: its text,
// then the images read here, then the files, which the server reads from
// the workspace. Without either it is nil: the prompt goes as text.
func attachBlocks(c *cli.Context, text string) ([]sandbox.InputBlock, error) {
	images, files := c.StringSlice("image"), c.StringSlice("file")
	if len(images) == 0 && len(files) == 0 {
		return nil, nil
	}
	blocks := []sandbox.InputBlock{{Type: "text", Text: text}}
	for _, p := range images {
		mt, ok := imageTypes[strings.ToLower(filepath.Ext(p))]
		if !ok {
			return nil, usagef("--image %s: name a .png, .jpg, .gif or .webp file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, usagef("--image %s: %v", p, err)
		}
		blocks = append(blocks, sandbox.InputBlock{Type: "image", MediaType: mt, Data: base64.StdEncoding.EncodeToString(data)})
	}
	for _, p := range files {
		blocks = append(blocks, sandbox.InputBlock{Type: "file", Path: p})
	}
	return blocks, nil
}
