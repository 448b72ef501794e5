package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIUsage runs command lines the CLI cannot run: each is refused
// with one line that says what was meant or where to look, and exit
// status 64, apart from the statuses of turns.
func TestCLIUsage(t *testing.T) {
	env := cliEnv(t)
	for _, tt := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"Typo", []string{"promt", "hello"}, `sparkles: unknown command "promt"; did you mean "prompt"?` + "\n"},
		{"Swap", []string{"pormpt"}, `sparkles: unknown command "pormpt"; did you mean "prompt"?` + "\n"},
		{"Unknown", []string{"xyzzy"}, "sparkles: unknown command \"xyzzy\"; see `sparkles --help`\n"},
		{"SubcommandTypo", []string{"sandbox", "creat"}, `sparkles: unknown command "sandbox creat"; did you mean "sandbox create"?` + "\n"},
		{"FlagBeforeArgs", []string{"prompt", "--bogus", "hello"}, "sparkles: unknown flag --bogus; see `sparkles prompt --help`\n"},
		{"FlagAfterArgs", []string{"prompt", "hello", "--bogus"}, "sparkles: unknown flag --bogus; see `sparkles prompt --help`\n"},
		{"FlagOfApp", []string{"--bogus"}, "sparkles: unknown flag --bogus; see `sparkles --help`\n"},
		{"MissingArgument", []string{"sandbox", "get"}, "sparkles: `sparkles sandbox get` takes ID, got 0 argument(s); see `sparkles sandbox get --help`\n"},
		{"URLPort", []string{"sandbox", "list", "--url", "7420"}, `sparkles: --url "7420" is a port; pass the server's URL, e.g. --url http://127.0.0.1:7420` + "\n"},
		{"URLHostPort", []string{"sandbox", "list", "--url", "127.0.0.1:7420"}, `sparkles: --url "127.0.0.1:7420" is host:port; pass the server's URL, e.g. --url http://127.0.0.1:7420` + "\n"},
		{"AddrPort", []string{"serve", "--addr", "7420", "--data-dir", t.TempDir()}, `sparkles: --addr "7420" is a port; pass host:port, e.g. --addr 127.0.0.1:7420` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, env, tt.args...)
			if res.code != exitUsage || res.stderr != tt.stderr || res.stdout != "" {
				t.Fatalf("sparkles %s:\n%v\nwant exit %d and stderr %q", strings.Join(tt.args, " "), res, exitUsage, tt.stderr)
			}
		})
	}
	t.Run("GroupWithoutCommand", func(t *testing.T) {
		// A command that only groups others shows them, and succeeds.
		res := run(t, env, "sandbox")
		if res.code != 0 || !strings.Contains(res.stdout, "create") || !strings.Contains(res.stdout, "delete") {
			t.Fatalf("sparkles sandbox: %v", res)
		}
	})
	t.Run("HelpOnce", func(t *testing.T) {
		res := run(t, env, "prompt", "--help")
		if res.code != 0 || strings.Count(res.stdout, "USAGE:") != 1 || strings.Contains(res.stdout, "help, h") {
			t.Fatalf("prompt --help shows its help once, without a help subcommand: %v", res)
		}
	})
}

// TestCLIVersion checks `sparkles version` and `--version` against what
// the go command says it stamped into the binary.
func TestCLIVersion(t *testing.T) {
	out, err := exec.Command(goTool(), "version", "-m", binary).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var version, commit string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			version = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			commit = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	if version == "" {
		t.Fatalf("go version -m names no module version:\n%s", out)
	}
	want := "sparkles " + version + ", commit unknown"
	if commit != "" {
		want = "sparkles " + version + ", commit " + commit
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := run(t, cliEnv(t), args...)
		if res.code != 0 || !strings.HasPrefix(res.stdout, want) || strings.Count(res.stdout, "\n") != 1 {
			t.Fatalf("sparkles %s:\n%v\nwant one line starting %q", args[0], res, want)
		}
	}
}

// TestCLINoToken runs a client command with no token anywhere: it says so
// and where it looked, instead of reporting a rejection by the server.
func TestCLINoToken(t *testing.T) {
	env := cliEnv(t, "SPARKLES_URL=http://127.0.0.1:1")
	file := filepath.Join(envValue(env, "SPARKLES_DATA_DIR"), "token")
	res := run(t, env, "sandbox", "list")
	want := "sparkles: no token found: --token and SPARKLES_TOKEN are unset and " + file +
		" does not exist; start `sparkles serve` (it writes that file), pass the server's --data-dir, or pass --token\n"
	if res.code != 1 || res.stderr != want {
		t.Fatalf("got %v\nwant exit 1 and stderr %q", res, want)
	}
}
