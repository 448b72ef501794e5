package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCommandFromServerPATH: a bare agent command is looked up on the
// server's PATH, never on the PATH of the agent's environment, which a
// sandbox's env sets: a sandbox must not choose what the server runs.
func TestCommandFromServerPATH(t *testing.T) {
	dir := t.TempDir()
	const name = "sparkles-path-test-agent"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(envPATH string) error {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := Start(ctx, Config{Command: []string{name}, Dir: t.TempDir(), Env: []string{"PATH=" + envPATH}})
		if c != nil {
			c.Close()
		}
		return err
	}

	t.Run("ErrOnlyOnAgentPATH", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		if got, want := errString(start(dir)), "agent command was not found"; got != want {
			t.Fatalf("err = %q, want %q", got, want)
		}
	})
	t.Run("OnServerPATH", func(t *testing.T) {
		t.Setenv("PATH", dir)
		// Found and started: it then exits without speaking ACP.
		if got := errString(start(t.TempDir())); got == "agent command was not found" {
			t.Fatalf("err = %q: the server's PATH was not used", got)
		}
	})
}
