package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// The test binary doubles as the agent: with SPARKLES_TEST_AGENT set, TestMain
// runs the named agent over stdin and stdout instead of the tests, so the
// client is exercised through real pipes and a real process.
const agentVar = "SPARKLES_TEST_AGENT"

var fakeAgents = map[string]func() int{
	"demo":     runDemoAgent,
	"silent":   fakeSilent,
	"sleeper":  func() int { time.Sleep(time.Hour); return 0 },
	"exit1":    func() int { return 1 },
	"refuse":   fakeRefuse,
	"oldproto": fakeOldProto,
	"longline": fakeLongLine,
	"garbage":  fakeGarbage,
	"noise":    fakeNoise,
	"ids":      fakeIDs,
	"fsprobe":  fakeFSProbe,
	"flood":    fakeFlood,
	"stubborn": fakeStubborn,
	"escape":   fakeEscape,
}

func runDemoAgent() int {
	err := RunDemo(context.Background(), os.Stdin, os.Stdout, os.Environ())
	switch {
	case errors.Is(err, ErrCrash):
		return 3
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fakePeer is the agent side of the protocol, written plainly for tests.
type fakePeer struct {
	in  *bufio.Reader
	out io.Writer
}

func newFakePeer() *fakePeer {
	return &fakePeer{in: bufio.NewReaderSize(os.Stdin, 1<<20), out: os.Stdout}
}

func (f *fakePeer) read() message {
	line, err := f.in.ReadBytes('\n')
	if err != nil {
		os.Exit(0) // the client closed our stdin
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "fake agent: bad line %q\n", line)
		os.Exit(2)
	}
	return m
}

func (f *fakePeer) raw(s string) { io.WriteString(f.out, s+"\n") }

func (f *fakePeer) send(v any) {
	b, _ := json.Marshal(v)
	f.raw(string(b))
}

func (f *fakePeer) answer(id json.RawMessage, result any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (f *fakePeer) update(u any) {
	f.send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1", "update": u}})
}

// handshake answers initialize and session/new.
func (f *fakePeer) handshake() {
	m := f.read()
	f.answer(m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}})
	m = f.read()
	f.answer(m.ID, map[string]any{"sessionId": "s1"})
}

// prompt reads until the next session/prompt and returns its id and text.
func (f *fakePeer) prompt() (json.RawMessage, string) {
	for {
		m := f.read()
		if m.Method != "session/prompt" {
			continue
		}
		var p struct {
			Prompt []textBlock `json:"prompt"`
		}
		json.Unmarshal(m.Params, &p)
		return m.ID, p.Prompt[0].Text
	}
}

// awaitResponse reads until a response arrives and returns its raw line
// fields.
func (f *fakePeer) awaitResponse() message {
	for {
		if m := f.read(); m.Method == "" {
			return m
		}
	}
}

// fakeSilent never answers. It starts a child in its process group that
// shares its stdout, so that the client's read loop can only end once the
// whole group is gone, and records both pids.
func fakeSilent() int {
	if pidFile := os.Getenv("SPARKLES_TEST_PIDFILE"); pidFile != "" {
		child := exec.Command(os.Args[0])
		child.Env = []string{agentVar + "=sleeper"}
		child.Stdout = os.Stdout
		if err := child.Start(); err != nil {
			return 2
		}
		os.WriteFile(pidFile, fmt.Appendf(nil, "%d %d", os.Getpid(), child.Process.Pid), 0o644)
		fmt.Fprintln(os.Stderr, "ready")
	}
	io.Copy(io.Discard, os.Stdin)
	time.Sleep(time.Hour) // ignore the end of stdin: only a kill ends this agent
	return 0
}

func fakeRefuse() int {
	f := newFakePeer()
	m := f.read()
	f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32000, "message": "authentication required"}})
	f.read()
	return 0
}

func fakeOldProto() int {
	f := newFakePeer()
	m := f.read()
	f.answer(m.ID, map[string]any{"protocolVersion": 7})
	f.read()
	return 0
}

// fakeLongLine sends a 100 MiB line right after the handshake, in pieces so
// that it never holds the line itself.
func fakeLongLine() int {
	f := newFakePeer()
	f.handshake()
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	w.WriteString(`{"jsonrpc":"2.0","method":"session/update","params":{"x":"`)
	piece := strings.Repeat("A", 1<<20)
	for range 100 {
		if _, err := w.WriteString(piece); err != nil {
			return 0 // the client stopped reading and closed the pipe
		}
	}
	w.WriteString("\"}}\n")
	w.Flush()
	f.read()
	return 0
}

// fakeGarbage mixes invalid lines into a normal turn.
func fakeGarbage() int {
	f := newFakePeer()
	f.handshake()
	id, _ := f.prompt()
	f.raw("Starting agent v1.2.3 ...")
	f.raw(`{"jsonrpc":"2.0","method":"session/update","params":`) // cut short
	f.raw(`[1,2,3]`)
	f.raw(`{"hello":"world"}`)
	f.raw(`"just a string"`)
	f.raw("")
	f.raw("   ")
	f.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "hi"}})
	f.send(map[string]any{"jsonrpc": "2.0", "method": "some/other_notification", "params": map[string]any{}})
	f.answer(id, map[string]any{"stopReason": "end_turn"})
	f.read()
	return 0
}

// fakeNoise prints nothing but noise after the handshake.
func fakeNoise() int {
	f := newFakePeer()
	f.handshake()
	for i := range 1000 {
		f.raw(fmt.Sprintf("log line %d", i))
	}
	f.read()
	return 0
}

// fakeIDs sends requests with ids 0 and "abc" and one the client does not
// know, then reports the raw ids of the answers it got in an update.
func fakeIDs() int {
	f := newFakePeer()
	f.handshake()
	id, _ := f.prompt()
	perm := map[string]any{"sessionId": "s1", "toolCall": map[string]any{"toolCallId": "t1"}, "options": []any{}}
	var got []string
	for _, rid := range []string{`0`, `"abc"`} {
		f.raw(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"session/request_permission","params":%s}`, rid, mustJSON(perm)))
		m := f.awaitResponse()
		got = append(got, string(m.ID)+" "+string(m.Result))
	}
	f.raw(`{"jsonrpc":"2.0","id":7,"method":"terminal/create","params":{}}`)
	m := f.awaitResponse()
	got = append(got, fmt.Sprintf("%s %d", m.ID, m.Error.Code))
	f.update(map[string]any{"sessionUpdate": "ids", "got": got})
	f.answer(id, map[string]any{"stopReason": "end_turn", "usage": map[string]any{"totalTokens": 3}})
	f.read()
	return 0
}

// fakeFSProbe takes a JSON list of requests as its prompt, sends them one by
// one, and reports each answer (result or error) in an update.
func fakeFSProbe() int {
	f := newFakePeer()
	f.handshake()
	for {
		id, text := f.prompt()
		var reqs []struct {
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		json.Unmarshal([]byte(text), &reqs)
		var answers []json.RawMessage
		for i, r := range reqs {
			f.send(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprintf("fs-%d", i), "method": r.Method, "params": r.Params})
			m := f.awaitResponse()
			if m.Error != nil {
				answers = append(answers, mustJSON(map[string]any{"error": m.Error}))
			} else {
				answers = append(answers, mustJSON(map[string]any{"result": m.Result}))
			}
		}
		f.update(map[string]any{"sessionUpdate": "answers", "answers": answers})
		f.answer(id, map[string]any{"stopReason": "end_turn"})
	}
}

// fakeFlood sends many numbered updates as fast as the pipe takes them.
func fakeFlood() int {
	f := newFakePeer()
	f.handshake()
	id, _ := f.prompt()
	w := bufio.NewWriter(os.Stdout)
	f.out = w
	for i := range floodCount {
		f.update(map[string]any{"sessionUpdate": "agent_message_chunk", "seq": i})
	}
	f.answer(id, map[string]any{"stopReason": "end_turn"})
	w.Flush()
	f.read()
	return 0
}

const floodCount = 1000

// fakeStubborn ignores the end of its stdin.
func fakeStubborn() int {
	f := newFakePeer()
	f.handshake()
	io.Copy(io.Discard, os.Stdin)
	time.Sleep(time.Hour)
	return 0
}

// fakeEscape leaves behind a child outside its process group that holds its
// stdout open, answers one prompt and exits.
func fakeEscape() int {
	f := newFakePeer()
	f.handshake()
	id, _ := f.prompt()
	child := exec.Command(os.Args[0])
	child.Env = []string{agentVar + "=sleeper"}
	child.Stdout = os.Stdout
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return 2
	}
	os.WriteFile(os.Getenv("SPARKLES_TEST_PIDFILE"), fmt.Appendf(nil, "%d", child.Process.Pid), 0o644)
	f.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "bye"}})
	f.answer(id, map[string]any{"stopReason": "end_turn"})
	return 0
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
