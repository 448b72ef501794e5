package e2e

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeGreeting starts serve as a person does, on a terminal, and as a
// service does, with its output piped: only the terminal gets the link
// that signs the console in, since the link carries the token.
func TestServeGreeting(t *testing.T) {
	t.Run("Terminal", func(t *testing.T) {
		master, tty := openPTY(t)
		dataDir := t.TempDir()
		log := greetServe(t, dataDir, tty)
		tty.Close()
		token := readToken(t, dataDir)
		screen := readUntil(t, master, `notes.txt"`)
		if !strings.Contains(screen, "/#token="+token+"\r\n") {
			t.Fatalf("the terminal got no sign-in link with the token:\n%s", screen)
		}
		if want := "sparkles prompt --url http://"; !strings.Contains(screen, want) || !strings.Contains(screen, "--data-dir "+dataDir) {
			t.Fatalf("the suggested command does not reach this server (want %s… and its --data-dir):\n%s", want, screen)
		}
		if strings.Contains(log(), token) {
			t.Fatalf("the log holds the token:\n%s", log())
		}
	})
	t.Run("Pipe", func(t *testing.T) {
		dataDir := t.TempDir()
		var stdout bytes.Buffer
		log := greetServe(t, dataDir, &stdout)
		token := readToken(t, dataDir)
		logged := log() // stops serve: stdout is complete
		if strings.Contains(stdout.String(), token) || strings.Contains(logged, token) {
			t.Fatalf("the token left serve through a pipe:\nstdout:\n%s\nlog:\n%s", stdout.String(), logged)
		}
	})
}

// greetServe runs serve on dataDir with the given stdout until it serves,
// and returns what it logged so far. It is stopped when the test ends.
func greetServe(t *testing.T, dataDir string, stdout io.Writer) (log func() string) {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--data-dir", dataDir, "--addr", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = cliEnv(t)
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	serving := make(chan bool, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), `"msg":"sparkles is serving"`) {
				serving <- true
			}
		}
		serving <- false
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(syscall.SIGTERM)
			<-logged
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	select {
	case ok := <-serving:
		if !ok {
			stop()
			t.Fatalf("serve ended before serving:\n%s", strings.Join(lines, "\n"))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start serving")
	}
	// The greeting is written after the log line: the log is complete
	// once the process has ended.
	return func() string { stop(); return strings.Join(lines, "\n") }
}

func readToken(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// readUntil reads a terminal's screen output until it holds want.
func readUntil(t *testing.T, master *os.File, want string) string {
	t.Helper()
	got := make(chan string)
	go func() {
		var seen []byte
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			seen = append(seen, buf[:n]...)
			if bytes.Contains(seen, []byte(want)) || err != nil {
				got <- string(seen)
				return
			}
		}
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, want) {
			t.Fatalf("the terminal ended without %q:\n%s", want, s)
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("the terminal never showed %q", want)
	}
	return ""
}
