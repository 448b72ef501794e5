package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"
)

// The sandbox of a one-shot prompt: what it is called, how to go on with
// it, and how it goes away.

// nameWords is how many of the prompt's first words name its sandbox, and
// nameWordLen how much of each.
const (
	nameWords   = 3
	nameWordLen = 12
)

// fillers are words that begin many prompts and tell them apart from none.
var fillers = map[string]bool{"please": true, "can": true, "could": true, "would": true, "you": true, "the": true, "a": true, "an": true}

// sandboxName is a short name for the sandbox of a prompt, from its first
// words, with a random suffix so that the same prompt twice gives two
// names a person can tell apart: "write-notes-txt-3f2a".
func sandboxName(prompt string) string {
	words := strings.FieldsFunc(strings.ToLower(prompt), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	var kept []string
	for _, w := range words {
		if fillers[w] && len(words) > nameWords {
			continue
		}
		if r := []rune(w); len(r) > nameWordLen {
			w = string(r[:nameWordLen])
		}
		if kept = append(kept, w); len(kept) == nameWords {
			break
		}
	}
	if len(kept) == 0 {
		kept = []string{"prompt"}
	}
	var b [2]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return strings.Join(kept, "-") + "-" + hex.EncodeToString(b[:])
}

// serverFlags are the flags that name the server a command talked to, for
// a command it suggests. What came from the environment is there for the
// next command too.
func serverFlags(c *cli.Context) string {
	s := ""
	if u := c.String("url"); u != defaultURL && u != os.Getenv("SPARKLES_URL") {
		s += " --url " + shellQuote(u)
	}
	if d := c.String("data-dir"); c.IsSet("data-dir") && c.String("token") == "" && d != os.Getenv("SPARKLES_DATA_DIR") {
		s += " --data-dir " + shellQuote(d)
	}
	return s
}

// continueCommand is the command that prompts the same sandbox of the same
// server again.
func continueCommand(c *cli.Context, id string) string {
	return "sparkles prompt --sandbox " + id + serverFlags(c) + ` "…"`
}

// deleteCommand is the command that deletes the sandbox.
func deleteCommand(c *cli.Context, id string) string {
	return "sparkles sandbox delete " + id + serverFlags(c)
}

// removeSandbox deletes the sandbox of a prompt run with --rm, and says
// so, or says how to delete it when it could not.
func removeSandbox(api *apiClient, errw io.Writer, id, deleteCmd string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.DeleteSandbox(ctx, id); err != nil {
		fmt.Fprintf(errw, "sparkles: could not delete sandbox %s (%s); delete it with: %s\n", id, api.describe(err), deleteCmd)
		return
	}
	fmt.Fprintf(errw, "sandbox %s deleted\n", id)
}
