package coordinator

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentLogCapped: an agent that writes without end fills agent.log up
// to the cap, then agent.log.1 takes it and agent.log starts again; no
// third file, and the newest lines are in agent.log.
func TestAgentLogCapped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.log")
	const max = 1 << 20
	l, err := openAgentLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 32<<10-1)
	chunk = append(chunk, '\n')
	for range 5 * max / len(chunk) {
		if n, err := l.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if _, err := l.Write([]byte("the last line\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"agent.log", "agent.log.1"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() > max {
			t.Errorf("%s: %v, want at most %d bytes", name, err, max)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("%d files in the sandbox dir, want agent.log and agent.log.1", len(ents))
	}
	if b, _ := os.ReadFile(path); !bytes.HasSuffix(b, []byte("the last line\n")) {
		t.Error("the newest line is not in agent.log")
	}

	// A new boot appends to what is there and counts it.
	l, err = openAgentLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	l.Write(bytes.Repeat([]byte("y"), max))
	l.Close()
	if fi, _ := os.Stat(path); fi.Size() != max {
		t.Errorf("agent.log after a reopen: %d bytes, want the new %d only", fi.Size(), max)
	}
}

// TestAgentLogTail: the tail a failed boot logs is the end of what the
// agent wrote since the log was opened, whole lines, at most 2 KiB.
func TestAgentLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.log")
	if err := os.WriteFile(path, []byte("an earlier boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := openAgentLog(path, agentLogMax)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Tail(); got != "" {
		t.Fatalf("Tail of a new boot = %q, want nothing", got)
	}
	l.Write([]byte("one\ntw"))
	l.Write([]byte("o\n"))
	if got, want := l.Tail(), "one\ntwo\n"; got != want {
		t.Fatalf("Tail = %q, want %q", got, want)
	}
	line := bytes.Repeat([]byte("x"), 99)
	line = append(line, '\n')
	for range 50 {
		l.Write(line)
	}
	l.Write([]byte("the last line\n"))
	got := l.Tail()
	if len(got) > agentLogTail || !strings.HasSuffix(got, "\nthe last line\n") || !strings.HasPrefix(got, string(line)) {
		t.Fatalf("Tail after 5 KiB: %d bytes, want at most %d of whole lines ending with the last one", len(got), agentLogTail)
	}
}
