package main

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
// revises it, as redaction can); otherwise each part is printed once, when
// it is complete, so a pipe gets clean text. Assistant text goes to out;
// on a terminal everything else does too, otherwise it goes to errw.
type renderer struct {
	out, errw io.Writer
	tty       bool
	fd        int
	hide      bool // reasoning

	// Terminal: the part whose block is at the bottom of the screen.
	cur, curKind, curText string
	midLine               bool
	// Pipe: parts seen but not printed yet, in order.
	pending []sandbox.MessageUpdated
	// Parts whose text was shown (a closed block, or printed).
	shown map[string]string
	tools map[string]string // the last line shown per tool call
}

func newRenderer(out, errw io.Writer, hideReasoning bool) *renderer {
	r := &renderer{out: out, errw: errw, hide: hideReasoning, shown: map[string]string{}, tools: map[string]string{}}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.tty, r.fd = true, int(f.Fd())
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
	if _, done := r.shown[d.PartID]; done {
		return
	}
	if !r.tty {
		// Another part began: those before it are complete.
		r.flushExcept(d.PartID)
		for i := range r.pending {
			if r.pending[i].PartID == d.PartID {
				r.pending[i] = *d
				return
			}
		}
		r.pending = append(r.pending, *d)
		return
	}
	if d.PartID != r.cur {
		r.endBlock()
		r.cur, r.curKind, r.curText = d.PartID, d.Kind, ""
	}
	if strings.HasPrefix(d.Text, r.curText) {
		r.write(d.Text[len(r.curText):])
	} else {
		r.redraw(d.Text)
	}
	r.curText = d.Text
}

// write appends to the block at the bottom of the terminal.
func (r *renderer) write(s string) {
	s = sanitize(s, true)
	if s == "" {
		return
	}
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
		if !r.tty {
			r.print(part.PartID, part.Kind, part.Text)
			continue
		}
		r.cur, r.curKind, r.curText = part.PartID, part.Kind, ""
		r.write(part.Text)
		r.curText = part.Text
		r.endBlock()
	}
}

func (r *renderer) tool(d *sandbox.ToolUpdated) {
	line := "[" + d.Kind + "] " + oneLine(d.Title, 100) + ": " + d.Status
	if r.tools[d.ToolCallID] == line {
		return
	}
	r.tools[d.ToolCallID] = line
	r.flush()
	r.info(line)
}

// info prints a line about the turn that is not assistant text.
func (r *renderer) info(line string) {
	r.flush()
	w := r.errw
	if r.tty {
		w = r.out
	}
	fmt.Fprintln(w, sanitize(line, false))
}

func (r *renderer) finish() { r.flush() }

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
