package translate

import (
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// What a command the agent runs prints reaches a client that advertised
// clientCapabilities._meta.terminal_output in a tool call update's _meta:
// terminal_output {terminal_id, data} with data to append, then
// terminal_exit {terminal_id, exit_code, signal} with the final status.
// claude-agent-acp 0.23.1 sends a Bash tool's whole output in one
// terminal_output. codex-acp 0.16.0 forwards the chunks Codex streams, and
// Codex streams none for a command that ends within its first wait: that
// command's whole output comes only with the exit, as rawOutput's
// aggregated_output (Codex's ExecCommandEndEvent), which is read then and
// only when no chunk came. The terminal id is the agent's and never leaves;
// the tool call names the tool.

// DropOutputAfterEnd counts terminal output that came after its command
// ended, which no agent sends: the output of an ended command is final.
const DropOutputAfterEnd = "tool_output_after_end"

// rawTerminalMeta is the part of a tool call update's _meta this package
// reads when Config.ToolOutput is set.
type rawTerminalMeta struct {
	Output *struct {
		Data *string `json:"data"`
	} `json:"terminal_output"`
	Exit *struct {
		ExitCode *int64 `json:"exit_code"`
	} `json:"terminal_exit"`
	// whole is the output that came with the exit, if any.
	whole *string
}

// rawExecEnd is the part of codex-acp's rawOutput of an ended command
// that holds what it printed, stdout and stderr interleaved.
type rawExecEnd struct {
	AggregatedOutput *string `json:"aggregated_output"`
}

// toolOutput is what the translator holds of one tool's output while its
// command runs: the tail of the text, escape sequences stripped, not yet
// redacted. buf stays under 2*MaxToolOutputBytes: past that, all but the
// last MaxToolOutputBytes go at once, so each byte is moved about once.
type toolOutput struct {
	strip    ansiStripper
	buf      []byte
	streamed bool // a terminal_output came: the exit's whole output would repeat it
	dropped  bool // output before buf was dropped
	exit     *int
	ended    bool // the final tool.output is out; buf is released

	sent   sandbox.ToolOutput // the last tool.output
	sentAt time.Time          // zero until the first
	dirty  bool               // output arrived that no tool.output carries yet
}

// terminalMeta decodes the terminal output and exit of an update, nil when
// it has neither or tool output is off. Without Config.ToolOutput the
// agent was not told the capability and its _meta is never read.
func (t *Translator) terminalMeta(u *rawUpdate) *rawTerminalMeta {
	if !t.toolOutput || isNull(u.Meta) {
		return nil
	}
	var m rawTerminalMeta
	if err := json.Unmarshal(u.Meta, &m); err != nil {
		t.drop(DropMalformed)
		return nil
	}
	if (m.Output == nil || m.Output.Data == nil) && m.Exit == nil {
		return nil
	}
	if m.Exit != nil && !isNull(u.RawOutput) {
		// Any other shape of rawOutput holds no output of this kind.
		var end rawExecEnd
		if json.Unmarshal(u.RawOutput, &end) == nil {
			m.whole = end.AggregatedOutput
		}
	}
	return &m
}

// output applies the terminal meta m (nil when none) to the output of tool
// tl. While the command runs its output is coalesced like a message part:
// at most one tool.output per flush interval. When the command ends (an
// exit, or ends: the tool finishes) the final one goes out at once, with
// the exit code, and the output is closed.
func (t *Translator) output(now time.Time, tl *tool, m *rawTerminalMeta, ends bool, evs []*sandbox.Event) []*sandbox.Event {
	if m != nil && tl.out == nil {
		tl.out = &toolOutput{}
	}
	o := tl.out
	if o == nil {
		return evs
	}
	if o.ended {
		if m != nil {
			t.drop(DropOutputAfterEnd)
		}
		return evs
	}
	grew := false
	if m != nil && m.Output != nil && m.Output.Data != nil {
		o.streamed = true
		grew = t.writeOutput(o, *m.Output.Data)
	}
	if m != nil && m.whole != nil && !o.streamed {
		t.writeOutput(o, *m.whole)
	}
	if m != nil && m.Exit != nil {
		if c := m.Exit.ExitCode; c != nil && *c >= math.MinInt32 && *c <= math.MaxInt32 {
			code := int(*c)
			o.exit = &code
		}
		ends = true
	}
	if ends {
		return t.endOutput(now, tl, evs)
	}
	if !grew {
		return evs
	}
	if o.sentAt.IsZero() || now.Sub(o.sentAt) >= t.interval {
		return t.emitOutput(now, tl, false, evs)
	}
	if !o.dirty {
		o.dirty = true
		t.growing = append(t.growing, tl)
	}
	return evs
}

// endOutput sends the final tool.output of tl's command, if it has output,
// and releases what it held.
func (t *Translator) endOutput(now time.Time, tl *tool, evs []*sandbox.Event) []*sandbox.Event {
	o := tl.out
	if o == nil || o.ended {
		return evs
	}
	evs = t.emitOutput(now, tl, true, evs)
	o.ended, o.dirty, o.buf, o.sent = true, false, nil, sandbox.ToolOutput{}
	return evs
}

// emitOutput sends tl's output: redacted whole when final, else cut before
// anything at its end that could still grow into a secret, a token or a
// path (as an open message part is). Nothing is sent when it would repeat
// the last one.
func (t *Translator) emitOutput(now time.Time, tl *tool, final bool, evs []*sandbox.Event) []*sandbox.Event {
	o := tl.out
	s := string(o.buf)
	var text string
	if final {
		text = t.redact(s)
	} else {
		text, _ = t.red.scrub(s, t.red.hold(s))
	}
	d := sandbox.ToolOutput{ToolCallID: tl.state.ToolCallID, Text: text, Truncated: o.dropped, ExitCode: o.exit}
	if len(d.Text) > sandbox.MaxToolOutputBytes {
		d.Text, d.Truncated = tailOutput(d.Text, sandbox.MaxToolOutputBytes), true
	}
	o.dirty = false
	if !o.sentAt.IsZero() && d.Text == o.sent.Text && d.Truncated == o.sent.Truncated && sameCode(d.ExitCode, o.sent.ExitCode) {
		return evs
	}
	o.sent, o.sentAt = d, now
	d.ExitCode = sandbox.ClonePtr(d.ExitCode)
	return append(evs, t.event(now, sandbox.TypeToolOutput, &d))
}

// writeOutput appends data to o, stripped, and drops all but the last
// MaxToolOutputBytes when o grows past twice that. A cut inside a secret,
// a token or a path would show the rest of it, which redaction no longer
// recognises: such a region is replaced by what it reads as instead. An
// unfinished private key block keeps its BEGIN line, so that what follows
// is still redacted to its end. It reports whether text was added: an
// escape sequence alone adds none.
func (t *Translator) writeOutput(o *toolOutput, data string) bool {
	n := len(o.buf)
	o.buf = o.strip.append(o.buf, data)
	if len(o.buf) == n {
		return false
	}
	if len(o.buf) <= 2*sandbox.MaxToolOutputBytes {
		return true
	}
	s := string(o.buf)
	head, rest := "", tail(s, sandbox.MaxToolOutputBytes-outputSlack)
	cut := len(s) - len(rest)
	for _, g := range t.red.regions(s) {
		if g.a >= cut {
			break
		}
		if cut >= g.b {
			continue
		}
		switch {
		case g.b < len(s):
			head, rest = g.repl, s[g.b:]
		case strings.HasPrefix(s[g.a:], "-----BEGIN"):
			end := strings.Index(s[g.a:], "KEY-----")
			if end < 0 || g.a+end+len("KEY-----") > cut {
				head = "-----BEGIN PRIVATE KEY-----"
			} else {
				head = s[g.a : g.a+end+len("KEY-----")]
			}
		default:
			head, rest = g.repl, ""
		}
		break
	}
	o.buf = append(append(make([]byte, 0, 2*sandbox.MaxToolOutputBytes), head...), rest...)
	o.dropped = true
	return true
}

// outputSlack is room a trimmed output keeps for what a cut region reads
// as and for redaction making text longer, so that the text sent rarely
// needs a cut of its own.
const outputSlack = 64

// flushOutputs sends the coalesced tool.output whose interval has passed.
func (t *Translator) flushOutputs(now time.Time, evs []*sandbox.Event) []*sandbox.Event {
	kept := t.growing[:0]
	for _, tl := range t.growing {
		o := tl.out
		if o == nil || o.ended || !o.dirty {
			continue
		}
		if now.Sub(o.sentAt) < t.interval {
			kept = append(kept, tl)
			continue
		}
		evs = t.emitOutput(now, tl, false, evs)
	}
	clear(t.growing[len(kept):])
	t.growing = kept
	return evs
}

// nextOutputFlush returns when flushOutputs next has something to send.
func (t *Translator) nextOutputFlush() (time.Time, bool) {
	var at time.Time
	ok := false
	for _, tl := range t.growing {
		if o := tl.out; o != nil && !o.ended && o.dirty {
			if due := o.sentAt.Add(t.interval); !ok || due.Before(at) {
				at, ok = due, true
			}
		}
	}
	return at, ok
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// tailOutput is tail for redacted text: what is left of a cut [REDACTED]
// would read as the command's own, so it goes too.
func tailOutput(s string, n int) string {
	s = tail(s, n)
	if i := strings.IndexByte(s, ']'); i >= 0 && i < len(Redacted)-1 && strings.HasSuffix(Redacted, s[:i+1]) {
		s = s[i+1:]
	}
	return s
}

func sameCode(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// tail returns the last n bytes of s or fewer, starting on a rune boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// ansiStripper removes terminal escape sequences and control bytes but
// newline and tab from a stream of text; a sequence split across chunks
// is removed whole. A sequence that never ends is given up after
// maxEscapeBytes, so that a stray ESC cannot swallow the rest of the output.
type ansiStripper struct {
	state byte
	n     int // bytes of the current sequence
}

const maxEscapeBytes = 4096

// States of ansiStripper.
const (
	ansiText      = iota
	ansiEsc       // after ESC
	ansiEscInter  // ESC and intermediate bytes: ESC ( B
	ansiCSI       // ESC [ or CSI: parameters until a final byte
	ansiString    // OSC, DCS, SOS, PM, APC: until BEL or ST
	ansiStringEsc // ESC within a string: ST if "\"
)

func (a *ansiStripper) append(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if a.state != ansiText {
			if a.n++; a.n > maxEscapeBytes {
				a.state = ansiText
			}
		}
		switch a.state {
		case ansiText:
			switch {
			case c == 0x1b:
				a.state, a.n = ansiEsc, 0
			case c == '\n' || c == '\t':
				dst = append(dst, c)
			case c < 0x20 || c == 0x7f:
			case c == 0xc2 && i+1 < len(s) && s[i+1] == 0x9b:
				// CSI as a C1 control.
				a.state, a.n = ansiCSI, 0
				i++
			case c == 0xc2 && i+1 < len(s) && 0x80 <= s[i+1] && s[i+1] <= 0x9f:
				i++
			default:
				dst = append(dst, c)
			}
		case ansiEsc:
			switch {
			case c == '[':
				a.state = ansiCSI
			case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
				a.state = ansiString
			case 0x20 <= c && c <= 0x2f:
				a.state = ansiEscInter
			case c < 0x20 || c >= 0x7f:
				// A stray ESC: what follows is text.
				a.state = ansiText
				i--
			default:
				a.state = ansiText // a two-byte sequence: ESC 7, ESC M…
			}
		case ansiEscInter:
			switch {
			case 0x20 <= c && c <= 0x2f:
			case c < 0x20 || c >= 0x7f:
				a.state = ansiText
				i--
			default:
				a.state = ansiText
			}
		case ansiCSI:
			switch {
			case 0x20 <= c && c <= 0x3f:
			case 0x40 <= c && c <= 0x7e:
				a.state = ansiText
			default:
				a.state = ansiText
				i--
			}
		case ansiString:
			switch c {
			case 0x07:
				a.state = ansiText
			case 0x1b:
				a.state = ansiStringEsc
			}
		case ansiStringEsc:
			switch c {
			case '\\':
				a.state = ansiText
			case 0x1b:
			default:
				a.state = ansiString
			}
		}
	}
	return dst
}
