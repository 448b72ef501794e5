package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sparkles-dev/sparkles/sparklestest"
)

// openPTY opens a pseudo-terminal: what is written to tty is read from
// master.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("name the terminal: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// TestDiffTerminal runs sparkles diff with its stdout on a terminal: it
// colours, unless NO_COLOR or TERM=dumb says not to.
func TestDiffTerminal(t *testing.T) {
	srv, id := startSandbox(t)
	turn, _ := runTurn(t, srv, id, "write notes.txt")
	master, tty := openPTY(t)
	show := func() string {
		t.Helper()
		var out, errw bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = tty, &errw
		if err := app.Run([]string{"sparkles", "diff", "--url", srv.URL, "--token", sparklestest.DefaultToken, id, turn}); err != nil {
			t.Fatalf("diff: %v (%s)", err, errw.String())
		}
		// A line of its own marks the end of what the command wrote.
		fmt.Fprintln(tty, "END")
		buf := make([]byte, 4096)
		for !strings.Contains(out.String(), "END\r\n") {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil && err != io.EOF {
				t.Fatalf("read the terminal: %v", err)
			}
		}
		return strings.ReplaceAll(strings.TrimSuffix(out.String(), "END\r\n"), "\r\n", "\n")
	}

	t.Setenv("TERM", "xterm")
	t.Setenv("NO_COLOR", "")
	got := show()
	for _, want := range []string{"\x1b[1mdiff --git a/notes.txt b/notes.txt\x1b[0m\n", "\x1b[1m+++ b/notes.txt\x1b[0m\n", "\x1b[36m@@ ", "\n\x1b[32m+"} {
		if !strings.Contains(got, want) {
			t.Errorf("the terminal shows %q, without %q", got, want)
		}
	}
	for _, env := range [][2]string{{"NO_COLOR", "1"}, {"TERM", "dumb"}} {
		t.Setenv(env[0], env[1])
		if got := show(); strings.Contains(got, "\x1b[") || !strings.Contains(got, "diff --git a/notes.txt b/notes.txt\n") {
			t.Errorf("with %s=%s the terminal shows %q, want the diff without colours", env[0], env[1], got)
		}
	}
}
