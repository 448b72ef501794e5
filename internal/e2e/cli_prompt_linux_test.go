package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sparkles-dev/sparkles/internal/vtscreen"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// ttyRun is sparkles run on a terminal of its own, stdin, stdout and
// stderr, as in a terminal window; vt is what the window shows.
type ttyRun struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	chunks chan []byte
	vt     *vtscreen.Screen
	ended  bool // the output ended
}

const ttyCols = 100

func startTTY(t *testing.T, env []string, args ...string) *ttyRun {
	t.Helper()
	master, tty := openPTY(t)
	ws := struct{ rows, cols, x, y uint16 }{40, ttyCols, 0, 0}
	if err := ioctl(tty, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		t.Fatalf("size the terminal: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	r := &ttyRun{t: t, master: master, cmd: cmd, chunks: make(chan []byte, 64), vt: vtscreen.New(ttyCols)}
	go func() {
		defer close(r.chunks)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				r.chunks <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				return // EIO once the program has closed the terminal
			}
		}
	}()
	return r
}

// waitFor reads the screen until it shows s.
func (r *ttyRun) waitFor(s string) {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(r.vt.String(), s) {
		select {
		case b, ok := <-r.chunks:
			if !ok {
				r.t.Fatalf("the screen never showed %q:\n%s", s, r.vt.String())
			}
			r.vt.Write(b)
		case <-deadline:
			r.t.Fatalf("the screen never showed %q:\n%s", s, r.vt.String())
		}
	}
}

// wait reads the screen to the end and returns the exit status.
func (r *ttyRun) wait() int {
	r.t.Helper()
	for b := range r.chunks {
		r.vt.Write(b)
	}
	err := r.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		r.t.Fatal(err)
	}
	return 0
}

// TestCLIPromptTerminal runs prompt in a terminal window, as a person
// does: one line per tool that ends as ✓ / ⊘, and a closing summary.
func TestCLIPromptTerminal(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, append(serverEnv(srv), "TERM=xterm-256color", "NO_COLOR=")...)

	t.Run("Approve", func(t *testing.T) {
		r := startTTY(t, env, "prompt", "hello, please write notes.txt")
		r.waitFor("[N]o")
		if _, err := r.master.WriteString("y\n"); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(); code != 0 {
			t.Fatalf("exit %d:\n%s", code, r.vt)
		}
		screen := r.vt.String()
		for _, want := range []string{"\n✓ Read notes.txt\n", "\n✓ Write notes.txt\n", "I wrote notes.txt.", "\n✓ succeeded in ", " · 4 tokens in, 6 out\n", "\n  continue: sparkles prompt --sandbox c_"} {
			if !strings.Contains(screen, want) {
				t.Errorf("the screen lacks %q", want)
			}
		}
		// Each tool is one line, updated in place: no line per state.
		if n := strings.Count(screen, "Read notes.txt"); n != 1 || strings.Contains(screen, "running") || strings.Contains(screen, "pending") {
			t.Errorf("a tool took more than its one line")
		}
		if !r.vt.Colored() {
			t.Errorf("no colour on a terminal that takes them")
		}
		if t.Failed() {
			t.Fatalf("screen:\n%s", screen)
		}
	})
	t.Run("NoColor", func(t *testing.T) {
		r := startTTY(t, append(env, "NO_COLOR=1"), "prompt", "hello")
		if code := r.wait(); code != 0 || !strings.Contains(r.vt.String(), "✓ Read README.md") {
			t.Fatalf("exit %d:\n%s", code, r.vt)
		}
		if r.vt.Colored() {
			t.Fatalf("colours with NO_COLOR set:\n%s", r.vt)
		}
	})
	t.Run("DumbTerminal", func(t *testing.T) {
		// A terminal that cannot move the cursor gets a line per state.
		r := startTTY(t, append(env, "TERM=dumb"), "prompt", "hello")
		if code := r.wait(); code != 0 || !strings.Contains(r.vt.String(), "\n[read] Read README.md: running\n[read] Read README.md: completed\n") {
			t.Fatalf("exit %d:\n%s", code, r.vt)
		}
		if r.vt.Colored() {
			t.Fatalf("colours on a dumb terminal:\n%s", r.vt)
		}
	})
	t.Run("CtrlCAtQuestion", func(t *testing.T) {
		r := startTTY(t, env, "prompt", "write notes.txt")
		r.waitFor("[N]o")
		if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		code := r.wait()
		screen := r.vt.String()
		if code != int(exitTurnCanceled) || !strings.Contains(screen, "\n⊘ Write notes.txt · canceled\n") || !strings.Contains(screen, "\n⊘ canceled after ") {
			t.Fatalf("exit %d, want %d and the tool canceled:\n%s", code, exitTurnCanceled, screen)
		}
		if strings.Contains(screen, "failed") || strings.Contains(screen, "turn_canceled") {
			t.Fatalf("the canceled tool is also shown failed, or in the server's words:\n%s", screen)
		}
	})
}

// TestCLIPromptPipeCtrlC answers the question with Ctrl-C while stdout is
// a pipe: the tool is canceled, in one line.
func TestCLIPromptPipeCtrlC(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)
	_, tty := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "prompt", "write notes.txt")
	cmd.Env = env
	cmd.Stdin = tty
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var seen []byte
	buf := make([]byte, 4096)
	for !bytes.HasSuffix(seen, []byte("[N]o ")) {
		n, err := stderr.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			cmd.Wait()
			t.Fatalf("sparkles asked nothing: %v\n%s", err, seen)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest := new(bytes.Buffer)
	rest.ReadFrom(stderr)
	err = cmd.Wait()
	all := string(seen) + rest.String()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != int(exitTurnCanceled) {
		t.Fatalf("exit %v, want %d:\n%s", err, exitTurnCanceled, all)
	}
	if !strings.Contains(all, "\n[edit] Write notes.txt: canceled\n") || strings.Contains(all, "Write notes.txt: failed") || strings.Contains(all, "turn_canceled") {
		t.Fatalf("the tool is not shown canceled, once:\n%s", all)
	}
	if strings.Contains(stdout.String(), "\x1b") {
		t.Fatalf("escape sequences on a stdout that is not a terminal: %q", stdout.String())
	}
}
