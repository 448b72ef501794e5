package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// renderer shows a turn's messages and tools. On a terminal the text of
// the part being written grows in place (and is redrawn if the server
// revises it, as redaction can), and, unless the terminal is dumb, each
// tool is one line that updates in place until it ends (see the live area)
// and the turn closes with a summary; otherwise each part is printed once,
// when it is complete, and each tool state change is a line, so a pipe gets
// clean text. Assistant text goes to out; on a terminal everything else
// does too, otherwise it goes to errw.
type renderer struct {
	out, errw io.Writer
	tty       bool
	fancy     bool // the terminal moves the cursor: the live area is drawn
	color     bool // and takes colours (NO_COLOR is unset)
	fd        int
	cols      int  // the terminal's width for tests; 0 asks the terminal
	hide      bool // reasoning

	// Terminal: the part whose block is at the bottom of the screen.
	cur, curKind, curText string
	midLine               bool
	// Pipe: parts seen but not printed yet, in order.
	pending []sandbox.MessageUpdated
	// Parts whose text was shown (a closed block, or printed).
	shown     map[string]string
	toolLines map[string]*toolLine
	denied    map[string]bool // tool calls whose approval was denied

	// The live area (prompt_live.go).
	live     []string // ids of the tools that have not ended, in order
	liveRows int      // rows the area takes on screen now, 0 when not drawn
	frame    int
	waiting  string // what the spinner says when no tool is live; "" for none
	asking   bool   // a question waits at the bottom
	status   liveStatus
	// canceling: the turn is being canceled, so a tool that fails now
	// fails of the cancel and is shown canceled.
	canceling bool
}

func newRenderer(out, errw io.Writer, hideReasoning bool) *renderer {
	r := &renderer{out: out, errw: errw, hide: hideReasoning, shown: map[string]string{}, toolLines: map[string]*toolLine{}, denied: map[string]bool{}}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.tty, r.fd = true, int(f.Fd())
		r.fancy = os.Getenv("TERM") != "dumb"
		r.color = r.fancy && os.Getenv("NO_COLOR") == ""
	}
	return r
}

const (
	faint = "\x1b[2m"
	reset = "\x1b[0m"
)

func (r *renderer) part(d *sandbox.MessageUpdated) {
	if d.Kind == sandbox.PartReasoning && r.hide {
		return
	}
	r.clearLive()
	defer r.drawLive()
	if r.tty {
		r.show(d.PartID, d.Kind, d.Text, false)
		return
	}
	if _, done := r.shown[d.PartID]; done {
		return
	}
	// Another part began: those before it are complete.
	r.flushExcept(d.PartID)
	for i := range r.pending {
		if r.pending[i].PartID == d.PartID {
			r.pending[i] = *d
			return
		}
	}
	r.pending = append(r.pending, *d)
}

// show brings a terminal's view of a part to text: the block at the
// bottom grows, or is redrawn when the text was revised. A part whose
// block was ended (a notice or a tool line came after it) goes on below
// from where it was; if its text was revised, it is written again below
// only when final (a message.completed), never for an update.
func (r *renderer) show(partID, kind, text string, final bool) {
	if prev, done := r.shown[partID]; done {
		switch {
		case text == prev:
			return
		case strings.HasPrefix(text, prev):
			r.resume(partID, kind, prev)
		case !final:
			return
		default:
			r.endBlock()
			delete(r.shown, partID)
			r.cur, r.curKind, r.curText = partID, kind, ""
		}
	} else if partID != r.cur {
		r.endBlock()
		r.cur, r.curKind, r.curText = partID, kind, ""
	}
	if strings.HasPrefix(text, r.curText) {
		r.write(text[len(r.curText):])
	} else {
		r.redraw(text)
	}
	r.curText = text
}

// resume makes a part whose block was ended the block at the bottom again,
// holding the text shown of it.
func (r *renderer) resume(partID, kind, shown string) {
	r.endBlock()
	delete(r.shown, partID)
	r.cur, r.curKind, r.curText = partID, kind, shown
}

// write appends to the block at the bottom of the terminal.
func (r *renderer) write(s string) {
	s = sanitize(s, true)
	if s == "" {
		return
	}
	r.advance(s)
	if r.curKind == sandbox.PartReasoning {
		fmt.Fprint(r.out, faint+s+reset)
	} else {
		fmt.Fprint(r.out, s)
	}
	r.midLine = !strings.HasSuffix(s, "\n")
}

// redraw replaces the block at the bottom of the terminal with text. When
// the block no longer fits on the screen it cannot be reached, so the new
// text is written below it instead.
func (r *renderer) redraw(text string) {
	cols, rows, err := term.GetSize(r.fd)
	n := screenRows(sanitize(r.curText, true), cols)
	if err != nil || cols <= 0 || n >= rows {
		r.endBlock()
		r.write(text)
		return
	}
	fmt.Fprint(r.out, "\r")
	if n > 1 {
		fmt.Fprintf(r.out, "\x1b[%dA", n-1)
	}
	fmt.Fprint(r.out, "\x1b[J")
	r.midLine = false
	r.write(text)
}

// screenRows is how many terminal rows s takes at the given width.
func screenRows(s string, cols int) int {
	if cols <= 0 {
		return 1
	}
	n := 0
	for _, line := range strings.Split(s, "\n") {
		w := utf8.RuneCountInString(line)
		n += max(1, (w+cols-1)/cols)
	}
	return n
}

// endBlock ends the block at the bottom of a terminal, so what follows
// starts on a line of its own.
func (r *renderer) endBlock() {
	if r.midLine {
		fmt.Fprintln(r.out)
		r.midLine = false
	}
	if r.cur != "" {
		r.shown[r.cur] = r.curText
		r.cur = ""
	}
}

// flush prints every pending part (pipe) or ends the block (terminal):
// whatever comes next means the parts before it are complete.
func (r *renderer) flush() { r.flushExcept("") }

func (r *renderer) flushExcept(partID string) {
	if r.tty {
		r.endBlock()
		return
	}
	keep := r.pending[:0]
	for _, d := range r.pending {
		if d.PartID == partID {
			keep = append(keep, d)
			continue
		}
		r.print(d.PartID, d.Kind, d.Text)
	}
	r.pending = keep
}

// print writes a complete part to a pipe: text to out, reasoning to errw.
func (r *renderer) print(partID, kind, text string) {
	r.shown[partID] = text
	text = sanitize(text, false)
	if text == "" {
		return
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if kind == sandbox.PartReasoning {
		fmt.Fprint(r.errw, "thinking: "+text)
		return
	}
	fmt.Fprint(r.out, text)
}

// completed reconciles the final message with what was shown: its parts
// carry the final text of each, including parts never seen as updates.
func (r *renderer) completed(d *sandbox.MessageCompleted) {
	r.clearLive()
	defer r.drawLive()
	if r.tty {
		for _, part := range d.Parts {
			if part.Kind != sandbox.PartReasoning || !r.hide {
				r.show(part.PartID, part.Kind, part.Text, true)
			}
		}
		r.endBlock()
		return
	}
	for _, part := range d.Parts {
		for i := range r.pending {
			if r.pending[i].PartID == part.PartID {
				r.pending[i].Text = part.Text
			}
		}
	}
	r.flush()
	for _, part := range d.Parts {
		if part.Kind == sandbox.PartReasoning && r.hide {
			continue
		}
		if shown, ok := r.shown[part.PartID]; ok && shown == part.Text {
			continue
		}
		r.print(part.PartID, part.Kind, part.Text)
	}
}

func (r *renderer) tool(d *sandbox.ToolUpdated) {
	t := r.toolLines[d.ToolCallID]
	if t == nil {
		t = &toolLine{}
		r.toolLines[d.ToolCallID] = t
	}
	if t.ended {
		// A tool shown canceled when the turn's cancel settled its
		// approval then fails: that failure is the cancel.
		return
	}
	status := d.Status
	switch {
	case (status == sandbox.ToolFailed || status == sandbox.ToolCanceled) && r.denied[d.ToolCallID]:
		// It did not run because it was denied: that is no failure.
		status = toolDenied
	case status == sandbox.ToolFailed && r.canceling:
		status = sandbox.ToolCanceled
	}
	if t.title == d.Title && t.kind == d.Kind && t.status == status {
		return
	}
	t.title, t.kind, t.status = d.Title, d.Kind, status
	ended := status == sandbox.ToolCompleted || status == sandbox.ToolFailed || status == sandbox.ToolCanceled || status == toolDenied
	t.ended = ended
	if !r.fancy {
		r.info("[" + t.kind + "] " + oneLine(t.title, 100) + ": " + t.status)
		return
	}
	r.clearLive()
	r.flush()
	i := indexOf(r.live, d.ToolCallID)
	switch {
	case ended && i >= 0:
		r.live = append(r.live[:i:i], r.live[i+1:]...)
		fallthrough
	case ended:
		fmt.Fprintln(r.out, r.toolDone(t))
	case i < 0:
		r.live = append(r.live, d.ToolCallID)
	}
	r.drawLive()
}

// toolDenied is how a tool whose approval was denied shows once it ends
// without running, as the console shows it.
const toolDenied = "denied"

// deny marks the tool of an approval that was denied, so that its end
// shows as denied rather than failed.
func (r *renderer) deny(a *sandbox.ApprovalRequested) {
	if a.ToolCallID != "" {
		r.denied[a.ToolCallID] = true
	}
}

// denialWords is how a turn that succeeded although requests of the agent
// were denied ends, in the console's words.
func denialWords(n int) string {
	if n == 1 {
		return "succeeded with a denial"
	}
	return fmt.Sprintf("succeeded with %d denials", n)
}

// toolCanceled shows a tool whose approval the turn's cancel settled as
// canceled, whatever the agent then says of it.
func (r *renderer) toolCanceled(a *sandbox.ApprovalRequested) {
	id := a.ToolCallID
	if id == "" {
		id = a.ApprovalID
	}
	title, kind := a.Title, a.Kind
	if t := r.toolLines[id]; t != nil && t.title != "" {
		title, kind = t.title, t.kind
	}
	r.tool(&sandbox.ToolUpdated{ToolCallID: id, Title: title, Kind: kind, Status: sandbox.ToolCanceled})
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// info prints a line about the turn that is not assistant text.
func (r *renderer) info(line string) {
	r.clearLive()
	r.flush()
	w := r.errw
	if r.tty {
		w = r.out
	}
	fmt.Fprintln(w, sanitize(line, false))
	r.drawLive()
}

// notice prints a line to errw, below what is shown.
func (r *renderer) notice(line string) {
	r.clearLive()
	r.endBlock()
	fmt.Fprintln(r.errw, line)
	r.drawLive()
}

// ask writes a question at the bottom, where the answer is typed; nothing
// is drawn below it until answered.
func (r *renderer) ask(q string) {
	r.clearLive()
	r.endBlock()
	r.asking = true
	fmt.Fprint(r.errw, q)
}

// answered ends a question: the Enter that sent the answer (or the newline
// written after it) put the cursor at the start of a line.
func (r *renderer) answered() {
	r.asking = false
	r.drawLive()
}

func (r *renderer) finish() {
	r.waiting = ""
	r.clearLive()
	r.flush()
}

// sanitize drops control characters, so text from an agent cannot move
// the cursor, change colors or retitle the terminal. Line breaks stay, and
// on a terminal tabs become spaces so that screenRows can count them.
func sanitize(s string, tty bool) string {
	clean := func(c rune) rune {
		switch {
		case c == '\n':
			return c
		case c == '\t':
			if tty {
				return ' '
			}
			return c
		case unicode.IsControl(c), c == utf8.RuneError:
			return -1
		}
		return c
	}
	return strings.Map(clean, s)
}

// canceledWhy is what a canceled turn adds to the word canceled: nothing
// for a cancel of the user's own (Ctrl-C, sparkles cancel), the reason when
// the server canceled it by stopping, so the two do not read the same.
func canceledWhy(d *sandbox.TurnCompleted) string {
	if d.Error != nil && d.Error.Code == sandbox.ErrServerStopped {
		return ": the server stopped during the turn"
	}
	return ""
}
