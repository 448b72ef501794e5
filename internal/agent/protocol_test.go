package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestLongLine(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const maxLine = 1 << 20
	c := MustStart(t, "longline", t.TempDir(), func(cfg *Config) { cfg.MaxLine = maxLine })
	in := next(t, c)
	if got, want := in.Kind, Exited; got != want {
		t.Fatalf("kind = %v, want %v", got, want)
	}
	if !in.Protocol {
		t.Fatalf("Exited.Protocol = false (%v)", in.Err)
	}
	if got, want := errString(in.Err), fmt.Sprintf("agent sent a line longer than %d bytes", maxLine); got != want {
		t.Fatalf("Err = %q, want %q", got, want)
	}
	waitDone(t, c)
	runtime.ReadMemStats(&after)
	// The agent sent 100 MiB; the client may hold one line's worth and its
	// growth, never the whole of it.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(16<<20); got > limit {
		t.Fatalf("allocated %d MiB reading the line, want at most %d MiB", got>>20, limit>>20)
	}
}

func TestInvalidLines(t *testing.T) {
	t.Run("Tolerated", func(t *testing.T) {
		c := MustStart(t, "garbage", t.TempDir())
		if err := c.Prompt("turn_1", "go"); err != nil {
			t.Fatal(err)
		}
		ins := until(t, c, PromptDone)
		if got, want := strings.Join(summary(t, ins), ","), "agent_message_chunk,done end_turn"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		// The banner, the cut line, the array, the object without a
		// method or id, the bare string; blank lines do not count.
		if got, want := c.InvalidLines(), int64(5); got != want {
			t.Fatalf("InvalidLines = %d, want %d", got, want)
		}
	})

	t.Run("ErrTooMany", func(t *testing.T) {
		c := MustStart(t, "noise", t.TempDir())
		in := next(t, c)
		if got, want := in.Kind, Exited; got != want {
			t.Fatalf("kind = %v, want %v", got, want)
		}
		if got, want := errString(in.Err), "agent sent too many invalid messages"; got != want || !in.Protocol {
			t.Fatalf("Err = %q (protocol %v), want %q", got, in.Protocol, want)
		}
	})
}

func TestRequestIDs(t *testing.T) {
	c := MustStart(t, "ids", t.TempDir())
	if err := c.Prompt("turn_1", "go"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`0`, `"abc"`} {
		in := next(t, c)
		if in.Kind != Permission {
			t.Fatalf("kind = %v, want %v", in.Kind, Permission)
		}
		if got := in.Request.String(); got != want {
			t.Fatalf("request id = %s, want %s", got, want)
		}
		if err := c.Respond(in.Request, PermissionSelected("allow_once")); err != nil {
			t.Fatal(err)
		}
	}
	u := parseUpdate(t, next(t, c))
	got := strings.Join(u.Update.Got, "\n")
	want := strings.Join([]string{
		`0 {"outcome":{"outcome":"selected","optionId":"allow_once"}}`,
		`"abc" {"outcome":{"outcome":"selected","optionId":"allow_once"}}`,
		`7 -32601`,
	}, "\n")
	if got != want {
		t.Fatalf("the agent received:\n%s\nwant:\n%s", got, want)
	}
	done := next(t, c)
	if got, want := done.Kind, PromptDone; got != want {
		t.Fatalf("kind = %v, want %v", got, want)
	}
	if got, want := string(done.Usage), `{"totalTokens":3}`; got != want {
		t.Fatalf("Usage = %s, want %s", got, want)
	}
}

func TestBackpressure(t *testing.T) {
	c := MustStart(t, "flood", t.TempDir())
	if err := c.Prompt("turn_1", "go"); err != nil {
		t.Fatal(err)
	}
	// Let the inbox fill while nothing is read: it stops at its bound and
	// the rest waits in the agent's pipe.
	poll(t, "the inbox to fill up", func() bool { return len(c.Inbox()) == cap(c.Inbox()) })
	for i := range floodCount {
		u := parseUpdate(t, next(t, c))
		if u.Update.Seq == nil || *u.Update.Seq != i {
			t.Fatalf("update %d: seq %v (dropped or reordered)", i, u.Update.Seq)
		}
	}
	if got, want := next(t, c).Kind, PromptDone; got != want {
		t.Fatalf("kind = %v, want %v", got, want)
	}
}

func TestLineReader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		max   int
		want  []string
		err   error
	}{
		{"OK", "a\nbb\r\nccc", 3, []string{"a", "bb", "ccc"}, io.EOF},
		{"ExactMax", "abcd\n", 4, []string{"abcd"}, io.EOF},
		{"ErrTooLong", "ab\nabcdef\nx\n", 4, []string{"ab"}, errLineTooLong},
		{"ErrTooLongWithoutNewline", "abcdefgh", 4, nil, errLineTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLineReader(strings.NewReader(tc.input), tc.max)
			var got []string
			for {
				line, err := lr.next()
				if err != nil {
					if err != tc.err {
						t.Fatalf("err = %v, want %v", err, tc.err)
					}
					break
				}
				got = append(got, string(line))
			}
			if g, w := strings.Join(got, "|"), strings.Join(tc.want, "|"); g != w {
				t.Fatalf("lines = %q, want %q", g, w)
			}
		})
	}
}

// FuzzDispatch feeds arbitrary lines to the dispatcher: whatever an agent
// prints, the client must not panic.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{}}`,
		`{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","id":"x","method":"session/request_permission","params":{}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`,
		`[]`, `null`, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	files, err := openFSRoot(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer files.close()
	f.Fuzz(func(t *testing.T, line []byte) {
		c := newTestConn()
		close(c.stopping) // nobody consumes: deliveries must not block
		c.files = files
		c.pending[0] = &call{prompt: true, turnID: "t"}
		c.pending[1] = &call{ch: make(chan callResult, 1)}
		c.dispatch(line)
		c.workers.Wait()
	})
}

// BenchmarkReadLoop measures how fast session updates go from the agent's
// pipe to the consumer:
//
//	go test ./internal/agent -run '^$' -bench ReadLoop -benchmem
func BenchmarkReadLoop(b *testing.B) {
	line := mustJSON(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
		"sessionId": "s1",
		"update":    map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": strings.Repeat("word ", 40)}},
	}})
	line = append(line, '\n')
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	c := newTestConn()
	c.stdout = r
	go func() {
		bw := bufio.NewWriterSize(w, 64<<10)
		for range b.N {
			bw.Write(line)
		}
		bw.Flush()
		w.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- c.readLoop(); close(c.inbox) }()
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for range c.Inbox() {
		n++
	}
	if err := <-done; err != nil || n != b.N {
		b.Fatalf("read %d of %d: %v", n, b.N, err)
	}
}

// newTestConn is a Conn with no process, for the read path alone.
func newTestConn() *Conn {
	return &Conn{
		log:      slog.New(slog.DiscardHandler),
		maxLine:  DefaultMaxLine,
		pending:  make(map[int64]*call),
		inbox:    make(chan Inbound, inboxSize),
		stopping: make(chan struct{}),
		ended:    make(chan struct{}),
		sem:      make(chan struct{}, maxWorkers),
	}
}

func mustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
}
