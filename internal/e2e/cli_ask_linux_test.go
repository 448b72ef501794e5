package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// openPTY opens a pseudo-terminal: what the test writes to master, the
// program reads from tty as typed at a terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	var n uint32
	if err := ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	if err := ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("number the pseudo-terminal: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal: %v", err)
	}
	return master, tty
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// ask runs sparkles with a terminal on stdin and pipes on stdout and
// stderr, waits for its first question on stderr, types answer and Enter,
// and returns the run and the question.
func ask(t *testing.T, env []string, answer string, args ...string) (res result, question string) {
	t.Helper()
	master, tty := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
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

	// The question ends without a newline, where the answer is typed.
	var seen []byte
	buf := make([]byte, 4096)
	for question == "" {
		n, err := stderr.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			cmd.Wait()
			t.Fatalf("sparkles asked nothing: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), seen)
		}
		if i := bytes.LastIndexByte(seen, '\n'); strings.HasSuffix(string(seen), "[N]o ") || strings.HasSuffix(string(seen), "[y/N] ") {
			question = string(seen[i+1:])
		}
	}
	if _, err := master.WriteString(answer + "\n"); err != nil {
		t.Fatalf("type the answer: %v", err)
	}
	rest := new(bytes.Buffer)
	if _, err := rest.ReadFrom(stderr); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	res = result{stdout: stdout.String(), stderr: string(seen) + rest.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("sparkles %s: %v", strings.Join(args, " "), err)
	}
	return res, question
}

// TestCLIPromptAsk answers the questions of prompt at a terminal, as a
// person does. The demo agent lists its allow_always option first, as
// Claude Code and Gemini CLI do.
func TestCLIPromptAsk(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)
	sb, err := srv.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	const wantQuestion = "Allow [edit] Write notes.txt? [y]es once / [a]lways (Always allow writes) / [N]o "
	// answer types line at the question of a write turn and returns the
	// run and the kind of option the approval was answered with.
	answer := func(t *testing.T, line string) (result, string) {
		t.Helper()
		res, q := ask(t, env, line, "prompt", "--sandbox", sb.ID, "write notes.txt")
		if q != wantQuestion {
			t.Fatalf("question = %q, want %q\n%v", q, wantQuestion, res)
		}
		// Stdout is a pipe: plain text, whatever stdin is.
		if strings.Contains(res.stdout, "\x1b") {
			t.Fatalf("escape sequences on a stdout that is not a terminal: %q", res.stdout)
		}
		log := approvalLog(t, srv, sb.ID)
		return res, log[len(log)-1].optionKind()
	}

	res, kind := answer(t, "y")
	if res.code != 0 || !strings.Contains(res.stdout, "I wrote notes.txt.") || !strings.Contains(res.stderr, ": approved once") {
		t.Fatalf("after y: %v", res)
	}
	if kind != sandbox.OptionAllowOnce {
		t.Fatalf("y answered with a %q option, want %s", kind, sandbox.OptionAllowOnce)
	}

	// Allowed once, the next write asks again; Enter denies.
	res, kind = answer(t, "")
	if res.code != int(exitDenied) || !strings.Contains(res.stdout, "You did not let me write notes.txt.") {
		t.Fatalf("after Enter: %v", res)
	}
	if kind != sandbox.OptionRejectOnce {
		t.Fatalf("Enter answered with a %q option, want %s", kind, sandbox.OptionRejectOnce)
	}

	res, kind = answer(t, "a")
	if res.code != 0 || !strings.Contains(res.stderr, ": always allowed (Always allow writes)") {
		t.Fatalf("after a: %v", res)
	}
	if kind != sandbox.OptionAllowAlways {
		t.Fatalf("a answered with a %q option, want %s", kind, sandbox.OptionAllowAlways)
	}

	// Allowed always, the agent writes without asking, even with no
	// terminal to ask on.
	asked := len(approvalLog(t, srv, sb.ID))
	res = run(t, env, "prompt", "--sandbox", sb.ID, "write notes.txt")
	if res.code != 0 || !strings.Contains(res.stdout, "I wrote notes.txt.") {
		t.Fatalf("the write after always: %v", res)
	}
	if got := len(approvalLog(t, srv, sb.ID)); got != asked {
		t.Fatalf("the agent asked again after always: %d approvals, want %d", got, asked)
	}
}
