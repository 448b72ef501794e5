package cli

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"golang.org/x/term"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The live area: on a terminal that moves the cursor, the bottom lines of
// the screen belong to what is still going on, one line per tool that has
// not ended and a spinner, redrawn in place. Everything else (text, tool
// lines once they end, notices, questions) is written above it: the area
// is erased, the output written, the area drawn again below it. It is not
// drawn while a question waits for an answer (the person types at the
// end of it). While assistant text is mid-line the text shows progress by
// itself, so the area is drawn below it only once the text has paused for
// a tick, on rows of its own, and erased by going back to the column the
// text ends at; when that column is not known for sure (a character whose
// width the terminal decides) it is not drawn there. The last line of the
// area says how long the turn has run.

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spinEvery is how often the spinner turns.
const spinEvery = 100 * time.Millisecond

// liveStatus is what the live area knows of the turn and of the text
// above it.
type liveStatus struct {
	start time.Time        // when the turn began; zero shows no time
	now   func() time.Time // the clock; nil is time.Now
	// The column the text at the bottom ends at while it is mid-line,
	// and whether it is uncertain.
	col       int
	uncertain bool
	wrote     bool // text was written since the last tick
	below     bool // the area is drawn below mid-line text
}

// toolLine is a tool as the renderer shows it.
type toolLine struct {
	title, kind, status string
	ended               bool // its last line was printed; later updates change nothing
}

// style wraps s in an SGR sequence when the terminal takes colours.
func (r *renderer) style(sgr, s string) string {
	if !r.color {
		return s
	}
	return "\x1b[" + sgr + "m" + s + reset
}

const (
	sgrGreen  = "32"
	sgrRed    = "31"
	sgrYellow = "33"
	sgrCyan   = "36"
	sgrDim    = "2"
	sgrBold   = "1"
)

func (r *renderer) width() int {
	if r.cols > 0 {
		return r.cols
	}
	if w, _, err := term.GetSize(r.fd); err == nil && w > 0 {
		return w
	}
	return 80
}

// clearLive erases the live area; the cursor ends where it began, at the
// start of a line.
func (r *renderer) clearLive() {
	if r.liveRows == 0 {
		return
	}
	s := "\r"
	if r.liveRows > 1 {
		s += fmt.Sprintf("\x1b[%dA", r.liveRows-1)
	}
	s += "\x1b[J"
	if r.status.below {
		// Back to the end of the text, on the row above.
		s += fmt.Sprintf("\x1b[A\x1b[%dG", r.status.col%r.width()+1)
		r.status.below = false
	}
	fmt.Fprint(r.out, s)
	r.liveRows = 0
}

// drawLive draws the live area below what was written, the cursor left at
// the end of its last line.
func (r *renderer) drawLive() {
	if !r.fancy || r.liveRows > 0 || r.midLine || r.asking {
		return
	}
	r.drawLines(r.liveLines(), "")
}

func (r *renderer) drawLines(lines []string, before string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(r.out, before+strings.Join(lines, "\n"))
	r.liveRows = len(lines)
}

// liveLines is the live area: a line per tool that has not ended, else
// what the spinner says, the last line with the time the turn has run.
func (r *renderer) liveLines() []string {
	spin := r.style(sgrCyan, spinner[r.frame%len(spinner)])
	type line struct{ title, note string }
	var lines []line
	for _, id := range r.live {
		t := r.toolLines[id]
		lines = append(lines, line{t.title, " · " + t.status})
	}
	if len(lines) == 0 && r.waiting != "" {
		lines = append(lines, line{"", r.waiting})
	}
	if len(lines) > 0 && !r.status.start.IsZero() {
		lines[len(lines)-1].note += " · " + r.elapsed()
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = r.fit(spin+" ", l.title, l.note)
	}
	return out
}

// elapsed is how long the turn has run, to the second.
func (r *renderer) elapsed() string {
	now := time.Now
	if r.status.now != nil {
		now = r.status.now
	}
	return max(0, now().Sub(r.status.start)).Truncate(time.Second).String()
}

// drawBelow draws the live area on the rows below mid-line text, when it
// knows where the text ends.
func (r *renderer) drawBelow() {
	if !r.fancy || r.liveRows > 0 || r.asking || r.status.uncertain {
		return
	}
	if w := r.width(); r.status.col > 0 && r.status.col%w == 0 {
		// The cursor waits past the last column: going back to it is
		// not possible with a column number.
		return
	}
	if lines := r.liveLines(); len(lines) > 0 {
		r.drawLines(lines, "\n")
		r.status.below = true
	}
}

// advance follows the column text written at the bottom ends at.
func (r *renderer) advance(s string) {
	if !r.midLine {
		r.status.col, r.status.uncertain = 0, false
	}
	r.status.wrote = true
	for _, c := range s {
		if c == '\n' {
			r.status.col, r.status.uncertain = 0, false
			continue
		}
		if !narrow(c) {
			r.status.uncertain = true
		}
		r.status.col++
	}
}

// narrow reports whether every terminal shows c in one column: not a wide
// or ambiguous East Asian character, an emoji or a combining mark. Those
// the live area does not try to draw below.
func narrow(c rune) bool {
	switch {
	case unicode.In(c, unicode.Mn, unicode.Me, unicode.Cf):
		return false
	case c < 0x1100, c >= 0x2000 && c < 0x2319, c >= 0x2500 && c < 0x25fd:
		return true
	}
	return false
}

// fit is one line of the live area: prefix, the title cut so that the line
// never wraps (so that it takes one row), the dimmed note.
func (r *renderer) fit(prefix, title, note string) string {
	room := r.width() - 1 - 2 - len([]rune(note))
	if room < 8 {
		room = 8
	}
	return prefix + sanitize(oneLine(title, room), true) + r.style(sgrDim, note)
}

// tick turns the spinner, and draws the area below text that paused.
func (r *renderer) tick() {
	if !r.fancy {
		return
	}
	if r.midLine && !r.asking {
		if r.status.wrote {
			r.status.wrote = false
			return
		}
		r.frame++
		r.clearLive()
		r.drawBelow()
		return
	}
	if r.liveRows == 0 {
		return
	}
	r.frame++
	r.clearLive()
	r.drawLive()
}

// setWaiting sets what the spinner says when nothing else is live, "" for
// no spinner.
func (r *renderer) setWaiting(s string) {
	if r.waiting == s {
		return
	}
	r.clearLive()
	r.waiting = s
	r.drawLive()
}

// toolDone is the line of a tool that ended, as a terminal shows it.
func (r *renderer) toolDone(t *toolLine) string {
	title := sanitize(oneLine(t.title, 100), true)
	switch t.status {
	case sandbox.ToolCompleted:
		return r.style(sgrGreen, "✓") + " " + title
	case sandbox.ToolCanceled, toolDenied:
		return r.style(sgrYellow, "⊘") + " " + title + r.style(sgrDim, " · "+t.status)
	}
	return r.style(sgrRed, "✗") + " " + title + r.style(sgrDim, " · "+t.status)
}

// turnSummary is how a terminal closes a turn: its outcome, how long it
// took, the tokens it used when the agent said, and how to go on in the
// same sandbox.
func (r *renderer) turnSummary(d *sandbox.TurnCompleted, denied int, next string) {
	took := time.Duration(d.DurationMS) * time.Millisecond
	if took >= time.Second {
		took = took.Round(100 * time.Millisecond)
	}
	var line string
	switch {
	case d.Status == sandbox.TurnSucceeded && denied > 0:
		// Not a plain success (exit status 3): amber, as in the console.
		line = r.style(sgrYellow, "✓") + " " + r.style(sgrBold, denialWords(denied)) + " in " + took.String()
	case d.Status == sandbox.TurnSucceeded:
		line = r.style(sgrGreen, "✓") + " " + r.style(sgrBold, "succeeded") + " in " + took.String()
	case d.Status == sandbox.TurnCanceled:
		line = r.style(sgrYellow, "⊘") + " " + r.style(sgrBold, "canceled") + " after " + took.String() + canceledWhy(d)
	default:
		line = r.style(sgrRed, "✗") + " " + r.style(sgrBold, "failed") + " after " + took.String()
		if d.Error != nil {
			line += ": " + sanitize(oneLine(d.Error.Message, 200), true)
		} else if d.StopReason != "" {
			line += " (" + d.StopReason + ")"
		}
	}
	if u := d.Usage; u != nil && u.InputTokens+u.OutputTokens > 0 {
		line += r.style(sgrDim, " · "+tokensUsed(u))
	}
	changed := changesLine(d.Changes, r.style)
	r.above(func() {
		fmt.Fprintln(r.out, line)
		if changed != "" {
			fmt.Fprintln(r.out, "  "+changed)
		}
		if next != "" {
			fmt.Fprintln(r.out, r.style(sgrDim, "  continue: "+next))
		}
	})
}

// above writes permanent output: below everything shown, above the live
// area.
func (r *renderer) above(write func()) {
	r.clearLive()
	r.endBlock()
	write()
	r.drawLive()
}
