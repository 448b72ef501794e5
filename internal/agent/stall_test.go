package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() { fakeAgents["deaf"] = fakeDeaf }

// fakeDeaf asks for a file too big for its stdin pipe, waits until the
// answer starts to arrive, says so, and never reads again.
func fakeDeaf() int {
	f := newFakePeer()
	f.handshake()
	f.prompt()
	f.send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file", "params": map[string]any{"sessionId": "s1", "path": "big.txt"}})
	if _, err := f.in.Peek(1); err != nil {
		return 0
	}
	f.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "asked"}})
	for {
		time.Sleep(time.Hour)
	}
}

// TestStalledAgent checks that an agent which stops reading its stdin
// cannot hold the callers that write to it: the write fails after the stall
// timeout, the agent is stopped, and the end is a protocol error.
func TestStalledAgent(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("x", 4<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := MustStart(t, "deaf", dir, func(cfg *Config) { cfg.StallTimeout = 200 * time.Millisecond })
	if err := c.Prompt("turn_1", "read big.txt"); err != nil {
		t.Fatal(err)
	}
	if got := parseUpdate(t, next(t, c)).Update.Content.Text; got != "asked" {
		t.Fatalf("update %q", got)
	}
	// The answer of 4 MiB sits in a write the agent never reads; a cancel
	// queues behind it.
	done := make(chan error, 1)
	go func() { done <- c.Cancel() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Cancel to an agent that reads nothing succeeded")
		}
	case <-time.After(waitLimit):
		t.Fatal("Cancel is still blocked on an agent that reads nothing")
	}
	got := until(t, c, Exited)
	in := got[len(got)-1]
	var pe *ProtocolError
	if !in.Protocol || !errors.As(in.Err, &pe) || !strings.Contains(pe.Error(), "did not read its input") {
		t.Fatalf("end = %+v (%v), want a protocol error about the unread input", in, in.Err)
	}
}
