package e2e

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestServeFileLimits: serve's flags set the limits of what the API
// writes into a workspace, and a write past one answers 413 naming it.
func TestServeFileLimits(t *testing.T) {
	const token = "spk_file_limits_test_token_0123456789"
	p := startServe(t, cliEnv(t), t.TempDir(), token, "--files-max-size", "1K", "--archive-max-entries", "2")
	p.waitServing()
	var sb sandbox.Sandbox
	p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)

	req, _ := http.NewRequest(http.MethodPut, p.url+"/v1/sandboxes/"+sb.ID+"/files/big.txt", bytes.NewReader(bytes.Repeat([]byte("x"), 2<<10)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 KiB file past --files-max-size 1K: %d", resp.StatusCode)
	}
	e := p.fails(http.MethodGet, "/v1/sandboxes/"+sb.ID+"/files/big.txt", nil)
	if e.Error.Type != sandbox.ENotFound {
		t.Fatalf("the refused file: %+v", e)
	}

	t.Run("ErrFlags", func(t *testing.T) {
		for _, args := range [][]string{
			{"--files-max-size", "lots"}, {"--archive-max-size", "0"}, {"--archive-max-entries", "0"},
		} {
			out := serveFails(t, args[0], append([]string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...)...)
			if !strings.Contains(out, args[0]) {
				t.Fatalf("serve %v: the error does not name the flag:\n%s", args, out)
			}
		}
	})
}
