package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// The exit statuses docs/cli.md documents, as a script sees them.
const (
	exitTurnCanceled = 2
	exitDenied       = 3
	exitUsage        = 64
)

// slowPauseEnv sets the pace of serve's demo agent.
const slowPauseEnv = "SPARKLES_DEMO_SLOW_PAUSE"

// binary is the sparkles binary built once for the tests that run it.
var binary string

func TestMain(m *testing.M) {
	if confine.IsEntry(os.Args) {
		confine.Main() // the agent launcher of a Main run by a test
	}
	var err error
	if moduleDir, err = findModuleDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "sparkles-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sparkles")
	build := exec.Command(goTool(), "build", "-o", binary, ".")
	build.Dir = moduleDir
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build sparkles: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command that runs the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// cliEnv is the environment of a run: nothing of the caller's SPARKLES_*
// settings, a data dir of the test's own, plus env.
func cliEnv(t *testing.T, env ...string) []string {
	t.Helper()
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SPARKLES_") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") {
			out = append(out, kv)
		}
	}
	// The demo agent of a server a test starts streams a slow reply at
	// the tests' pace, not at the pace a person needs to try Ctrl-C.
	out = append(out, "SPARKLES_DATA_DIR="+t.TempDir(), slowPauseEnv+"=10ms")
	return append(out, env...)
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v = val
		}
	}
	return v
}

func serverEnv(srv *sparklestest.Server) []string {
	return []string{"SPARKLES_URL=" + srv.URL, "SPARKLES_TOKEN=" + srv.Token}
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("sparkles %s: %v", strings.Join(args, " "), err)
	}
	return res
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func TestCLIPrompt(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)

	t.Run("ApproveAll", func(t *testing.T) {
		res := run(t, env, "prompt", "--approve-all", "write notes.txt")
		if res.code != 0 {
			t.Fatalf("want exit 0, got %v", res)
		}
		if !strings.HasPrefix(res.stderr, "sandbox c_") {
			t.Fatalf("stderr does not start with the new sandbox's id: %v", res)
		}
		if !strings.Contains(res.stdout, "I wrote notes.txt.") {
			t.Fatalf("stdout lacks the assistant's reply: %v", res)
		}
		if strings.Contains(res.stdout, "\x1b") {
			t.Fatalf("escape sequences on a stdout that is not a terminal: %q", res.stdout)
		}
	})
	t.Run("ApproveAllOnce", func(t *testing.T) {
		// The demo agent lists its allow_always option first and stops
		// asking once it is chosen: each turn asking again shows that
		// --approve-all granted one use each time.
		sb, err := srv.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if res := run(t, env, "prompt", "--approve-all", "--sandbox", sb.ID, "write notes.txt"); res.code != 0 {
				t.Fatalf("want exit 0, got %v", res)
			}
		}
		log := approvalLog(t, srv, sb.ID)
		if len(log) != 2 {
			t.Fatalf("the agent asked %d times in two turns, want 2", len(log))
		}
		for i, a := range log {
			if got, want := a.optionKind(), sandbox.OptionAllowOnce; got != want {
				t.Fatalf("approval %d answered with a %q option, want %s: %+v", i, got, want, a.resolved)
			}
		}
	})
	t.Run("DenyAll", func(t *testing.T) {
		res := run(t, env, "prompt", "--deny-all", "write notes.txt")
		if res.code == 0 {
			t.Fatalf("want a non-zero exit, got %v", res)
		}
		if !strings.Contains(res.stdout, "You did not let me write notes.txt.") {
			t.Fatalf("stdout lacks the assistant's reply: %v", res)
		}
	})
	t.Run("NoTerminal", func(t *testing.T) {
		res := run(t, env, "prompt", "write notes.txt")
		if res.code == 0 {
			t.Fatalf("want a non-zero exit, got %v", res)
		}
		if !strings.Contains(res.stderr, "--approve-all") {
			t.Fatalf("stderr does not say how to allow requests: %v", res)
		}
	})
	t.Run("ExistingSandbox", func(t *testing.T) {
		sb, err := srv.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// Flags after the text count too.
		res := run(t, env, "prompt", "read README.md", "--sandbox", sb.ID, "--hide-reasoning")
		if res.code != 0 {
			t.Fatalf("want exit 0, got %v", res)
		}
		if strings.Contains(res.stderr, "sandbox c_") || strings.Contains(res.stderr, "thinking:") {
			t.Fatalf("created a sandbox or showed reasoning: %v", res)
		}
		if got, want := strings.Count(res.stdout, "That is all from the demo agent."), 1; got != want {
			t.Fatalf("reply printed %d times, want %d: %v", got, want, res)
		}
	})
	t.Run("Plan", func(t *testing.T) {
		// Through a pipe, each plan the agent sends is one line, as a tool's.
		res := run(t, env, "prompt", "--approve-all", "write notes.txt, with a plan")
		if res.code != 0 {
			t.Fatalf("want exit 0, got %v", res)
		}
		for _, want := range []string{
			"[plan] 0 of 3 done: ◐ Read notes.txt · ○ Write notes.txt · ○ Reply\n",
			"[plan] 1 of 3 done: ✓ Read notes.txt · ◐ Write notes.txt · ○ Reply\n",
			"[plan] 3 of 3 done: ✓ Read notes.txt · ✓ Write notes.txt · ✓ Reply\n",
		} {
			if !strings.Contains(res.stderr, want) {
				t.Fatalf("no %q in %v", want, res)
			}
		}
	})
	t.Run("Failed", func(t *testing.T) {
		res := run(t, env, "prompt", "crash")
		if got, want := res.code, 1; got != want {
			t.Fatalf("exit %d, want %d: %v", got, want, res)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		res := run(t, env, "prompt", "--sandbox", "c_nosuchsandbox", "hello")
		if res.code == 0 || !strings.Contains(res.stderr, "not found") {
			t.Fatalf("want a not-found error, got %v", res)
		}
	})
}

func TestCLIEvents(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)
	res := run(t, env, "prompt", "--approve-all", "write notes.txt")
	if res.code != 0 {
		t.Fatalf("prompt: %v", res)
	}
	id := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(res.stderr, "\n", 2)[0], "sandbox "))
	page, err := srv.Client.Events(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("JSON", func(t *testing.T) {
		res := run(t, env, "events", id, "--json", "--since", "0")
		if res.code != 0 {
			t.Fatalf("want exit 0, got %v", res)
		}
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		if got, want := len(lines), len(page.Raw); got != want {
			t.Fatalf("%d lines, the log has %d events", got, want)
		}
		for i, line := range lines {
			var ev sandbox.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("line %d is not an envelope: %v\n%s", i, err, line)
			}
			if got, want := line, string(page.Raw[i]); got != want {
				t.Fatalf("line %d:\ngot  %s\nwant %s", i, got, want)
			}
		}
	})
	t.Run("Since", func(t *testing.T) {
		since := page.Events[2].ID
		res := run(t, env, "events", "--since", sandbox.FormatID(since), id)
		if res.code != 0 {
			t.Fatalf("want exit 0, got %v", res)
		}
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		if got, want := len(lines), len(page.Events)-3; got != want {
			t.Fatalf("%d lines, want %d: %v", got, want, res)
		}
		if !strings.Contains(lines[len(lines)-1], "turn.completed") {
			t.Fatalf("last line is not the turn's end: %q", lines[len(lines)-1])
		}
	})
	t.Run("Compact", func(t *testing.T) {
		// One line per event that fits 100 columns, without the ids of
		// parts and tools.
		res := run(t, env, "events", id)
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		if res.code != 0 || len(lines) != len(page.Events) {
			t.Fatalf("%d lines for %d events: %v", len(lines), len(page.Events), res)
		}
		for _, line := range lines {
			if n := utf8.RuneCountInString(line); n > 100 || strings.Contains(line, "tool_") || strings.Contains(line, "part_") {
				t.Fatalf("a line of %d columns, or with a part or tool id:\n%s", n, line)
			}
		}
	})
	t.Run("FollowApproval", func(t *testing.T) {
		// Following, an approval request says how to approve it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "events", id, "--follow", "--since", sandbox.FormatID(page.Events[len(page.Events)-1].ID))
		cmd.Env = env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		turn, err := srv.Client.StartTurn(ctx, id, "write follow.txt")
		if err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		var hint string
		for hint == "" && lines.Scan() {
			if i := strings.Index(lines.Text(), "→ sparkles approve "); i >= 0 {
				hint = lines.Text()[i+len("→ "):]
				if n := utf8.RuneCountInString(lines.Text()); n > 100 {
					t.Fatalf("the hint takes %d columns:\n%s", n, lines.Text())
				}
			}
		}
		args := strings.Fields(strings.TrimSuffix(hint, " (or deny)"))
		if len(args) != 4 || args[2] != id || !strings.HasPrefix(args[3], "appr_") {
			t.Fatalf("approval hint %q, want sparkles approve %s appr_…", hint, id)
		}
		if res := run(t, env, args[1:]...); res.code != 0 {
			t.Fatalf("the hint's command: %v", res)
		}
		for lines.Scan() {
			if strings.Contains(lines.Text(), "turn.completed") {
				break
			}
		}
		if got, err := srv.Client.GetTurn(ctx, id, turn.ID); err != nil || got.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn after the hint's approve: %+v, %v", got, err)
		}
	})
	t.Run("Follow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "events", id, "--follow", "--json")
		cmd.Env = env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		// The retained log first, then a turn started now, live.
		for i := range page.Raw {
			if !lines.Scan() {
				t.Fatalf("output ended after %d lines: %s", i, stderr.String())
			}
		}
		turn, err := srv.Client.StartTurn(ctx, id, "read README.md")
		if err != nil {
			t.Fatal(err)
		}
		for lines.Scan() {
			var ev sandbox.Event
			if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
				t.Fatalf("not an envelope: %v\n%s", err, lines.Text())
			}
			if ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turn.ID {
				break
			}
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("events --follow after an interrupt: %v\n%s", err, stderr.String())
		}
	})
}

func TestCLISandbox(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)

	res := run(t, env, "sandbox", "create", "--json", "--metadata", "team=blue", "--secret", "API_KEY=sk-test")
	if res.code != 0 {
		t.Fatalf("create: %v", res)
	}
	var sb client.CreatedSandbox
	if err := json.Unmarshal([]byte(res.stdout), &sb); err != nil {
		t.Fatalf("create --json: %v\n%s", err, res.stdout)
	}
	if sb.StreamToken == "" || sb.Metadata["team"] != "blue" {
		t.Fatalf("created %+v", sb)
	}
	if strings.Contains(res.stdout, "sk-test") {
		t.Fatal("the create answer shows a secret")
	}
	t.Run("List", func(t *testing.T) {
		res := run(t, env, "sandbox", "list")
		if res.code != 0 || !strings.HasPrefix(res.stdout, "ID ") || !strings.Contains(res.stdout, sb.ID) {
			t.Fatalf("list: %v", res)
		}
	})
	t.Run("Get", func(t *testing.T) {
		res := run(t, env, "sandbox", "get", sb.ID)
		if res.code != 0 || !strings.Contains(res.stdout, "metadata team  blue") {
			t.Fatalf("get: %v", res)
		}
	})
	t.Run("ListNewestFirst", func(t *testing.T) {
		second := run(t, env, "sandbox", "create", "--json")
		var sb2 client.CreatedSandbox
		if err := json.Unmarshal([]byte(second.stdout), &sb2); err != nil {
			t.Fatalf("create: %v", second)
		}
		res := run(t, env, "sandbox", "list")
		if i, j := strings.Index(res.stdout, sb2.ID), strings.Index(res.stdout, sb.ID); i < 0 || j < 0 || i > j {
			t.Fatalf("list, want %s before %s (newest first): %v", sb2.ID, sb.ID, res)
		}
		t.Cleanup(func() { run(t, env, "sandbox", "delete", sb2.ID) })
	})
	t.Run("Delete", func(t *testing.T) {
		res := run(t, env, "sandbox", "delete", sb.ID)
		if res.code != 0 || res.stdout != "deleted "+sb.ID+"\n" {
			t.Fatalf("delete: %v", res)
		}
	})
	t.Run("ListHidesDeleted", func(t *testing.T) {
		if res := run(t, env, "sandbox", "list"); strings.Contains(res.stdout, sb.ID) {
			t.Fatalf("a deleted sandbox is listed without --all: %v", res)
		}
		if res := run(t, env, "sandbox", "list", "--all"); !strings.Contains(res.stdout, sb.ID) {
			t.Fatalf("--all does not list the deleted sandbox: %v", res)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		res := run(t, env, "sandbox", "get", "c_nosuchsandbox")
		want := "sparkles: sandbox c_nosuchsandbox not found; `sparkles sandbox list` shows the sandboxes\n"
		if res.code == 0 || res.stderr != want {
			t.Fatalf("got %v\nwant stderr %q", res, want)
		}
	})
	t.Run("ErrArgs", func(t *testing.T) {
		res := run(t, env, "sandbox", "get")
		if res.code == 0 || !strings.Contains(res.stderr, "ID") {
			t.Fatalf("get without an id: %v", res)
		}
	})
}

func TestCLITurns(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer s.Close()
	// nextOf returns the next event of one of the given types.
	nextOf := func(types ...sandbox.Type) sandbox.Event {
		t.Helper()
		for {
			m, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind == client.KindEvent && slices.Contains(types, m.Event.Type) {
				return m.Event
			}
		}
	}
	next := func(typ sandbox.Type) sandbox.Event {
		t.Helper()
		return nextOf(typ)
	}

	t.Run("Approve", func(t *testing.T) {
		if _, err := c.StartTurn(ctx, sb.ID, "write notes.txt"); err != nil {
			t.Fatal(err)
		}
		appr := next(sandbox.TypeApprovalRequested).Data.(*sandbox.ApprovalRequested)
		res := run(t, env, "approve", sb.ID, appr.ApprovalID)
		if res.code != 0 || res.stdout != "approved "+appr.ApprovalID+"\n" {
			t.Fatalf("approve: %v", res)
		}
		res = run(t, env, "deny", sb.ID, appr.ApprovalID)
		if res.code == 0 || !strings.Contains(res.stderr, "already resolved") {
			t.Fatalf("deny after approve: %v", res)
		}
		if got, want := next(sandbox.TypeApprovalResolved).Data.(*sandbox.ApprovalResolved).OptionID, optionOf(t, appr, sandbox.OptionAllowOnce); got != want {
			t.Fatalf("a plain approve answered option %s, want the allow_once option %s", got, want)
		}
		if got, want := next(sandbox.TypeTurnCompleted).Data.(*sandbox.TurnCompleted).Status, sandbox.TurnSucceeded; got != want {
			t.Fatalf("turn %s, want %s", got, want)
		}
	})
	t.Run("ApproveOption", func(t *testing.T) {
		// Approved once before, the agent asks again; --option chooses its
		// allow_always, and then it stops asking.
		turn, err := c.StartTurn(ctx, sb.ID, "write notes.txt")
		if err != nil {
			t.Fatal(err)
		}
		var appr *sandbox.ApprovalRequested
		for appr == nil {
			ev := nextOf(sandbox.TypeApprovalRequested, sandbox.TypeTurnCompleted)
			if ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turn.ID {
				t.Fatal("the agent did not ask again after a plain approve")
			}
			appr, _ = ev.Data.(*sandbox.ApprovalRequested)
		}
		always := optionOf(t, appr, sandbox.OptionAllowAlways)
		if res := run(t, env, "approve", "--option", always, sb.ID, appr.ApprovalID); res.code != 0 {
			t.Fatalf("approve --option: %v", res)
		}
		if got := next(sandbox.TypeApprovalResolved).Data.(*sandbox.ApprovalResolved).OptionID; got != always {
			t.Fatalf("approve --option %s answered option %s", always, got)
		}
		next(sandbox.TypeTurnCompleted)
		if _, err := c.StartTurn(ctx, sb.ID, "write notes.txt"); err != nil {
			t.Fatal(err)
		}
		if ev := nextOf(sandbox.TypeApprovalRequested, sandbox.TypeTurnCompleted); ev.Type != sandbox.TypeTurnCompleted {
			t.Fatal("the agent asked again after approve --option with its allow_always option")
		}
	})
	t.Run("Help", func(t *testing.T) {
		res := run(t, env, "approve", "--help")
		if res.code != 0 || !strings.Contains(res.stdout, "A plain approve grants one use") || !strings.Contains(res.stdout, "--option") {
			t.Fatalf("approve --help does not say that a plain approve grants one use: %v", res)
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		turn, err := c.StartTurn(ctx, sb.ID, "hang")
		if err != nil {
			t.Fatal(err)
		}
		next(sandbox.TypeMessageUpdated) // the turn is running
		res := run(t, env, "cancel", sb.ID)
		if res.code != 0 || res.stdout != "canceling turn "+turn.ID+"\n" {
			t.Fatalf("cancel: %v", res)
		}
		if got, want := next(sandbox.TypeTurnCompleted).Data.(*sandbox.TurnCompleted).Status, sandbox.TurnCanceled; got != want {
			t.Fatalf("turn %s, want %s", got, want)
		}
		res = run(t, env, "cancel", sb.ID)
		if res.code == 0 || !strings.Contains(res.stderr, "no turn running") {
			t.Fatalf("cancel without a turn: %v", res)
		}
	})
}

func TestCLIErrors(t *testing.T) {
	srv := sparklestest.Start(t)

	t.Run("WrongToken", func(t *testing.T) {
		env := cliEnv(t, "SPARKLES_URL="+srv.URL, "SPARKLES_TOKEN=wrong")
		dataDir := envValue(env, "SPARKLES_DATA_DIR")
		res := run(t, env, "sandbox", "list")
		want := "sparkles: the server rejected the token of --token or SPARKLES_TOKEN; pass the server's token (a server on this machine keeps it in " +
			filepath.Join(dataDir, "token") + ")\n"
		if res.code == 0 || res.stderr != want {
			t.Fatalf("got %v\nwant stderr %q", res, want)
		}
	})
	t.Run("WrongTokenFile", func(t *testing.T) {
		// The file of another data dir: the error names the file it read.
		dataDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dataDir, "token"), []byte("spk_other\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env := append(cliEnv(t, "SPARKLES_URL="+srv.URL), "SPARKLES_DATA_DIR="+dataDir)
		res := run(t, env, "sandbox", "list")
		want := "sparkles: the server at " + srv.URL + " rejected the token in " + filepath.Join(dataDir, "token") +
			"; pass the --data-dir of that server, or its token with --token\n"
		if res.code == 0 || res.stderr != want {
			t.Fatalf("got %v\nwant stderr %q", res, want)
		}
	})
	t.Run("TokenFile", func(t *testing.T) {
		// A local server's token is read from the data dir when none is given.
		dataDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dataDir, "token"), []byte(srv.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env := append(cliEnv(t, "SPARKLES_URL="+srv.URL), "SPARKLES_DATA_DIR="+dataDir)
		if res := run(t, env, "sandbox", "list"); res.code != 0 {
			t.Fatalf("list with the token file: %v", res)
		}
	})
	t.Run("NoServer", func(t *testing.T) {
		stopped := sparklestest.Start(t)
		stopped.Stop()
		env := cliEnv(t, serverEnv(stopped)...)
		for _, args := range [][]string{{"sandbox", "list"}, {"prompt", "hello"}, {"events", "c_x"}} {
			res := run(t, env, args...)
			want := "sparkles: no sparkles server at " + stopped.URL + "; start one with `sparkles serve` or pass --url\n"
			if res.code == 0 || res.stderr != want {
				t.Fatalf("%s: got %v\nwant stderr %q", strings.Join(args, " "), res, want)
			}
		}
	})
	t.Run("BadURL", func(t *testing.T) {
		res := run(t, cliEnv(t), "sandbox", "list", "--url", "127.0.0.1:7410")
		if res.code == 0 || !strings.Contains(res.stderr, "--url") || strings.Count(res.stderr, "\n") != 1 {
			t.Fatalf("got %v", res)
		}
	})
}

// loggedApproval is one approval as a sandbox's log has it.
type loggedApproval struct {
	request  *sandbox.ApprovalRequested
	resolved *sandbox.ApprovalResolved // nil while pending
}

// optionKind is the kind of the option the approval was resolved with.
func (a loggedApproval) optionKind() string {
	if a.resolved == nil {
		return ""
	}
	for _, o := range a.request.Options {
		if o.OptionID == a.resolved.OptionID {
			return o.Kind
		}
	}
	return ""
}

// approvalLog reads the approvals of a sandbox from its log, oldest first.
func approvalLog(t *testing.T, srv *sparklestest.Server, id string) []loggedApproval {
	t.Helper()
	page, err := srv.Client.Events(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	var out []loggedApproval
	for _, ev := range page.Events {
		switch d := ev.Data.(type) {
		case *sandbox.ApprovalRequested:
			out = append(out, loggedApproval{request: d})
		case *sandbox.ApprovalResolved:
			for i := range out {
				if out[i].request.ApprovalID == d.ApprovalID {
					out[i].resolved = d
				}
			}
		}
	}
	return out
}

// optionOf returns the id of the approval's option of the given kind.
func optionOf(t *testing.T, a *sandbox.ApprovalRequested, kind string) string {
	t.Helper()
	for _, o := range a.Options {
		if o.Kind == kind {
			return o.OptionID
		}
	}
	t.Fatalf("approval %s offers no %s option: %+v", a.ApprovalID, kind, a.Options)
	return ""
}
