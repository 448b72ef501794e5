package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func newOutputScripted(c *clock, on bool) *Translator {
	return New(Config{
		SandboxID:  "c_1",
		Dir:        testDir,
		DataDir:    testDataDir,
		Secrets:    []string{testSecret},
		Now:        c.Now,
		NewID:      seqIDs(),
		ToolOutput: on,
	})
}

// termUpdate is a tool_call_update with the given _meta.
func termUpdate(meta string, more string) string {
	return `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1"` + more + `,"_meta":` + meta + `}}`
}

func termOutput(data string) string {
	b, _ := json.Marshal(data)
	return termUpdate(`{"terminal_output":{"terminal_id":"agent-secret-id-term","data":`+string(b)+`}}`, "")
}

// The shapes of recorded traffic: claude-agent-acp 0.23.1 announces a Bash
// tool with terminal content and terminal_info, sends the whole output
// once, then the exit with the status; codex-acp 0.16.0 streams chunks.
const (
	claudeAnnounce = `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"ls","kind":"execute","status":"pending","content":[{"type":"terminal","terminalId":"agent-secret-id-term"}],"_meta":{"claudeCode":{"toolName":"Bash"},"terminal_info":{"terminal_id":"agent-secret-id-term"}}}}`
	claudeExit     = `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"completed","rawOutput":"raw-canary","content":[{"type":"terminal","terminalId":"agent-secret-id-term"}],"_meta":{"claudeCode":{"toolName":"Bash"},"terminal_exit":{"terminal_id":"agent-secret-id-term","exit_code":0,"signal":null}}}}`
	codexAnnounce  = `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call","toolCallId":"agent-secret-id-t1","title":"make","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"agent-secret-id-term"}],"_meta":{"terminal_info":{"terminal_id":"agent-secret-id-term","cwd":"/srv/data/sandboxes/c_1/work"}}}}`
	// codex-acp 0.16.0 sends no chunk for a command that ends within
	// Codex's first wait: the whole output comes with the exit.
	codexExitWhole = `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"completed","rawOutput":{"call_id":"agent-secret-id-c","stdout":"raw-canary","aggregated_output":"\u001b[1mok\u001b[0m hunter2-supersecret-value\n/srv/data/sandboxes/c_1/work/b.go\n","formatted_output":"raw-canary"},"_meta":{"terminal_exit":{"terminal_id":"agent-secret-id-term","exit_code":0,"signal":null}}}}`
	codexExit      = `update {"sessionId":"sess-secret-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"agent-secret-id-t1","status":"failed","rawOutput":{"stdout":"raw-canary"},"_meta":{"terminal_exit":{"terminal_id":"agent-secret-id-term","exit_code":2,"signal":null}}}}`
)

func TestToolOutputScenarios(t *testing.T) {
	for _, tt := range []struct {
		name   string
		off    bool
		script string
		want   string
	}{
		{
			// The whole output at once: escape sequences and control bytes
			// gone but newline and tab, the secret redacted, paths
			// rewritten; the exit code comes before the status.
			name: "Claude",
			script: "start turn_1 list\n" + claudeAnnounce + "\n" +
				termOutput("\x1b[1;32mok\x1b[0m\tsrc\r\n\x07key hunter2-supersecret-value\n/srv/data/sandboxes/c_1/work/a.go\n\x1b]0;title\x07\x1b[2Kdone\n") + "\n" +
				claudeExit + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"list"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"ls","kind":"execute","status":"pending","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"ok\tsrc\nkey [REDACTED]\na.go\ndone\n","truncated":false,"exit_code":null}
tool.output turn_1 {"tool_call_id":"tool_1","text":"ok\tsrc\nkey [REDACTED]\na.go\ndone\n","truncated":false,"exit_code":0}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"ls","kind":"execute","status":"completed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
		{
			// Chunks to append, coalesced within the flush interval; an
			// escape sequence and the secret split across chunks; the
			// start of the secret is held back until it is whole.
			name: "Codex",
			script: "start turn_1 build\n" + codexAnnounce + "\n" +
				termOutput("\x1b[3") + "\n" +
				termOutput("1mred\x1b[0m\nhunter2-super") + "\nnext\ntick 10ms\n" +
				termOutput("secret-value\n") + "\nnext\nflush\ntick 40ms\nflush\nnext\n" +
				termOutput("last\n") + "\n" +
				codexExit + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"running","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"red\n","truncated":false,"exit_code":null}
=> next none
=> next +40ms
tool.output turn_1 {"tool_call_id":"tool_1","text":"red\n[REDACTED]\n","truncated":false,"exit_code":null}
=> next none
tool.output turn_1 {"tool_call_id":"tool_1","text":"red\n[REDACTED]\nlast\n","truncated":false,"exit_code":2}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"failed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":50,"usage":null,"changes":null}
`,
		},
		{
			// The whole output with the exit, when no chunk came; read
			// from its aggregated_output, and only that.
			name:   "CodexWholeAtExit",
			script: "start turn_1 build\n" + codexAnnounce + "\n" + codexExitWhole + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"running","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"ok [REDACTED]\nb.go\n","truncated":false,"exit_code":0}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"completed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
		{
			// Chunks came: the exit's whole output would repeat them.
			name: "CodexStreamedThenWhole",
			script: "start turn_1 build\n" + codexAnnounce + "\n" + termOutput("ok chunk\n") + "\n" +
				codexExitWhole + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"running","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"ok chunk\n","truncated":false,"exit_code":null}
tool.output turn_1 {"tool_call_id":"tool_1","text":"ok chunk\n","truncated":false,"exit_code":0}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"completed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
		{
			// Without Config.ToolOutput the agent's _meta is not read.
			name: "Off",
			off:  true,
			script: "start turn_1 list\n" + claudeAnnounce + "\n" + termOutput("hello\n") + "\n" +
				claudeExit + "\n" + codexExitWhole + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"list"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"ls","kind":"execute","status":"pending","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"ls","kind":"execute","status":"completed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
		{
			// A turn that ends while the command runs ends its output
			// first, without an exit code; output after the exit, which
			// no agent sends, is dropped.
			name: "TurnEndsFirst",
			script: "start turn_1 build\n" + codexAnnounce + "\n" +
				termOutput("one\n") + "\n" + termOutput("two\n") + "\nend cancel\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"build"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"running","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"one\n","truncated":false,"exit_code":null}
tool.output turn_1 {"tool_call_id":"tool_1","text":"one\ntwo\n","truncated":false,"exit_code":null}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"make","kind":"execute","status":"canceled","locations":[]}
turn.completed turn_1 {"status":"canceled","stop_reason":"canceled","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
		{
			// Output of a tool never announced announces it; malformed
			// _meta is dropped and the rest of the update still counts.
			name: "UnannouncedAndMalformed",
			script: "start turn_1 go\n" + termUpdate(`{"terminal_output":{"terminal_id":"agent-secret-id-term","data":"hi\n"}}`, `,"title":"echo hi","kind":"execute","status":"in_progress"`) + "\n" +
				termUpdate(`{"terminal_output":"meta-canary"}`, `,"title":"echo hi!"`) + "\n" +
				termUpdate(`{"terminal_exit":{"terminal_id":"agent-secret-id-term","exit_code":99999999999,"signal":"SIGKILL"}}`, `,"status":"failed"`) + "\n" +
				termOutput("late\n") + "\nend end_turn\n",
			want: `
turn.started turn_1 {"input":[{"type":"text","text":"go"}]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hi","kind":"execute","status":"running","locations":[]}
tool.output turn_1 {"tool_call_id":"tool_1","text":"hi\n","truncated":false,"exit_code":null}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hi!","kind":"execute","status":"running","locations":[]}
tool.updated turn_1 {"tool_call_id":"tool_1","title":"echo hi!","kind":"execute","status":"failed","locations":[]}
turn.completed turn_1 {"status":"succeeded","stop_reason":"end_turn","error":null,"duration_ms":0,"usage":null,"changes":null}
`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newOutputScripted(c, !tt.off)
			diffLines(t, run(t, tr, c, tt.script), lines(tt.want))
		})
	}
}

// TestToolOutputStats: output after the end and malformed _meta are
// counted.
func TestToolOutputStats(t *testing.T) {
	c := &clock{t: epoch}
	tr := newOutputScripted(c, true)
	run(t, tr, c, "start turn_1 go\n"+codexAnnounce+"\n"+termUpdate(`[1]`, "")+"\n"+codexExit+"\n"+termOutput("late\n")+"\nend end_turn\n")
	if got := tr.Stats().Dropped; got[DropMalformed] != 1 || got[DropOutputAfterEnd] != 1 {
		t.Fatalf("dropped = %v, want 1 %s and 1 %s", got, DropMalformed, DropOutputAfterEnd)
	}
}

// outputs returns the tool.output data of evs.
func outputs(evs []*sandbox.Event) []*sandbox.ToolOutput {
	var out []*sandbox.ToolOutput
	for _, ev := range evs {
		if o, ok := ev.Data.(*sandbox.ToolOutput); ok {
			out = append(out, o)
		}
	}
	return out
}

// TestToolOutputTail: the output keeps its last MaxToolOutputBytes and
// says earlier output was dropped; a cut through a secret, a token or a
// private key shows none of it.
func TestToolOutputTail(t *testing.T) {
	const limit = sandbox.MaxToolOutputBytes
	key := "-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat("KEYBODY0123456789+/\n", 2*limit/20)
	for _, tt := range []struct {
		name   string
		chunks []string
		// the final text starts with prefix, ends with suffix, and holds
		// none of lastAbsent; no text holds any of absent.
		prefix, suffix     string
		absent, lastAbsent []string
	}{
		{
			name:       "Lines",
			chunks:     manyLines(3000),
			suffix:     "line 2999\n",
			lastAbsent: []string{"line 0\n"},
		},
		{
			// The cut (outputSlack short of MaxToolOutputBytes from the
			// end) falls 15 bytes into the secret.
			name:   "CutThroughSecret",
			chunks: []string{strings.Repeat("a", limit+100) + testSecret + strings.Repeat("b", limit-74)},
			prefix: Redacted + "bbb",
			absent: []string{"value", "secret"},
		},
		{
			name:   "CutThroughToken",
			chunks: []string{strings.Repeat("a ", limit/2+100) + "sk-" + strings.Repeat("Z", 30) + " " + strings.Repeat("b", limit-88)},
			prefix: Redacted + " bbb",
			absent: []string{"ZZZ"},
		},
		{
			// A key block still open when it is cut stays redacted to its
			// end, and what follows it shows.
			name:   "CutThroughKey",
			chunks: []string{"before\n" + key, key[40:], "-----END RSA PRIVATE KEY-----\nafter\n"},
			suffix: Redacted + "\nafter\n",
			absent: []string{"KEYBODY", "before"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: epoch}
			tr := newOutputScripted(c, true)
			script := "start turn_1 go\n" + codexAnnounce + "\n"
			for _, ch := range tt.chunks {
				script += termOutput(ch) + "\ntick 100ms\n"
			}
			_, evs := play(t, tr, c, script+codexExit+"\n")
			outs := outputs(evs)
			if len(outs) == 0 {
				t.Fatal("no tool.output")
			}
			for _, o := range outs {
				if len(o.Text) > limit {
					t.Fatalf("text of %d bytes, want at most %d", len(o.Text), limit)
				}
				for _, a := range tt.absent {
					if strings.Contains(o.Text, a) {
						t.Fatalf("text holds %q: ...%s", a, o.Text[:min(len(o.Text), 80)])
					}
				}
			}
			last := outs[len(outs)-1]
			for _, a := range tt.lastAbsent {
				if strings.Contains(last.Text, a) {
					t.Fatalf("last text holds %q", a)
				}
			}
			if !last.Truncated || last.ExitCode == nil || *last.ExitCode != 2 {
				t.Fatalf("last output truncated %v exit %v, want truncated with exit code 2", last.Truncated, last.ExitCode)
			}
			if !strings.HasPrefix(last.Text, tt.prefix) || !strings.HasSuffix(last.Text, tt.suffix) {
				t.Fatalf("text %q…%q, want it to start with %q and end with %q",
					last.Text[:min(len(last.Text), 40)], last.Text[max(0, len(last.Text)-40):], tt.prefix, tt.suffix)
			}
		})
	}
}

func manyLines(n int) []string {
	var out []string
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "line %d\n", i)
		if i%100 == 99 {
			out = append(out, b.String())
			b.Reset()
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// TestToolOutputStreamedSecretNeverShows: however a command's output is
// split into chunks, no tool.output shows any part of the secret.
func TestToolOutputStreamedSecretNeverShows(t *testing.T) {
	text := "the key is " + testSecret + " and the path /srv/data/token\n"
	for size := 1; size <= 8; size++ {
		c := &clock{t: epoch}
		tr := newOutputScripted(c, true)
		script := "start turn_1 go\n" + codexAnnounce + "\n"
		for i := 0; i < len(text); i += size {
			script += termOutput(text[i:min(i+size, len(text))]) + "\ntick 60ms\n"
		}
		_, evs := play(t, tr, c, script+codexExit+"\n")
		for _, o := range outputs(evs) {
			for k := MinSecretLen; k <= len(testSecret); k++ {
				if strings.Contains(o.Text, testSecret[:k]) {
					t.Fatalf("chunks of %d: %q shows %q", size, o.Text, testSecret[:k])
				}
			}
			if strings.Contains(o.Text, "/srv/da") {
				t.Fatalf("chunks of %d: %q shows the data directory", size, o.Text)
			}
		}
	}
}

func TestStripANSI(t *testing.T) {
	for _, tt := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"Plain", []string{"a\tb\nc"}, "a\tb\nc"},
		{"Colours", []string{"\x1b[1;31merror\x1b[0m: x\x1b[K"}, "error: x"},
		{"SplitCSI", []string{"a\x1b", "[3", "8;5;12", "mb"}, "ab"},
		{"OSCBell", []string{"\x1b]0;title\x07a"}, "a"},
		{"OSCST", []string{"\x1b]8;;http://x\x1b", "\\link\x1b]8;;\x1b\\"}, "link"},
		{"Charset", []string{"\x1b(Bx\x1b)0y"}, "xy"},
		{"TwoByte", []string{"\x1b7a\x1b8\x1bMb"}, "ab"},
		{"Controls", []string{"a\r\n\x00\x08\x7fb\x0c"}, "a\nb"},
		{"C1", []string{"a\u009b31mb\u0085c"}, "abc"},
		{"StrayEsc", []string{"a\x1b\nb"}, "a\nb"},
		{"BadCSI", []string{"a\x1b[1\nb"}, "a\nb"},
		{"Unicode", []string{"héllo ✓ \x1b[32m日本\x1b[0m"}, "héllo ✓ 日本"},
		{"NeverEnds", []string{"a\x1b]", strings.Repeat("x", maxEscapeBytes+10)}, "a" + strings.Repeat("x", 11)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var a ansiStripper
			var out []byte
			for _, ch := range tt.chunks {
				out = a.append(out, ch)
			}
			if got := string(out); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
