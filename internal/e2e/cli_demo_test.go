package e2e

import (
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/agent"
)

// TestCLIPromptHelpWords checks that prompt --help lists every word of the
// demo agent.
func TestCLIPromptHelpWords(t *testing.T) {
	res := run(t, cliEnv(t), "prompt", "--help")
	if res.code != 0 {
		t.Fatalf("prompt --help: %v", res)
	}
	for _, w := range agent.DemoWords {
		if !strings.Contains(res.stdout, "  "+w.Word+" ") || !strings.Contains(res.stdout, w.Does) {
			t.Errorf("prompt --help does not list %q: %s", w.Word, res.stdout)
		}
	}
}

// TestDemoCommand: serve's demo agent goes at a person's pace unless its
// environment sets another, and a pace that is not a duration is a usage
// error that names the variable.
func TestDemoCommand(t *testing.T) {
	t.Run("Default", func(t *testing.T) {
		res := run(t, cliEnv(t), "agent", "demo", "--help")
		if !strings.Contains(res.stdout, "(default: "+agent.DemoPersonSlowPause.String()+")") {
			t.Fatalf("agent demo does not default to a person's pace: %v", res)
		}
	})
	t.Run("ErrUsage", func(t *testing.T) {
		res := run(t, cliEnv(t, slowPauseEnv+"=fast"), "serve", "--addr", "127.0.0.1:0")
		if res.code != exitUsage || !strings.Contains(res.stderr, slowPauseEnv) {
			t.Fatalf("serve with a malformed pace: %v", res)
		}
	})
}
