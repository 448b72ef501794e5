package cli

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The live area: on a terminal that moves the cursor, the bottom lines of
// the screen belong to what is still going on, one line per tool that has
// not ended and a spinner, redrawn in place. Everything else (text, tool
// lines once they end, notices, questions) is written above it: the area
// is erased, the output written, the area drawn again below it. It is not
// drawn while assistant text is mid-line (the text shows progress by
// itself) nor while a question waits for an answer (the person types at
// the end of it).

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spinEvery is how often the spinner turns.
const spinEvery = 100 * time.Millisecond

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
	fmt.Fprint(r.out, s+"\x1b[J")
	r.liveRows = 0
}

// drawLive draws the live area below what was written, the cursor left at
// the end of its last line.
func (r *renderer) drawLive() {
	if !r.fancy || r.liveRows > 0 || r.midLine || r.asking {
		return
	}
	spin := r.style(sgrCyan, spinner[r.frame%len(spinner)])
	var lines []string
	for _, id := range r.live {
		t := r.toolLines[id]
		lines = append(lines, r.fit(spin+" ", t.title, " · "+t.status))
	}
	if len(lines) == 0 && r.waiting != "" {
		lines = append(lines, r.fit(spin+" ", "", r.waiting))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(r.out, strings.Join(lines, "\n"))
	r.liveRows = len(lines)
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

// tick turns the spinner.
func (r *renderer) tick() {
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
	case sandbox.ToolCanceled:
		return r.style(sgrYellow, "⊘") + " " + title + r.style(sgrDim, " · canceled")
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
	switch d.Status {
	case sandbox.TurnSucceeded:
		line = r.style(sgrGreen, "✓") + " " + r.style(sgrBold, "succeeded") + " in " + took.String()
		if denied > 0 {
			line += fmt.Sprintf(", but %d request(s) of the agent were denied", denied)
		}
	case sandbox.TurnCanceled:
		line = r.style(sgrYellow, "⊘") + " " + r.style(sgrBold, "canceled") + " after " + took.String()
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
		fmt.Fprintln(r.out, r.style(sgrDim, "  continue: "+next))
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
