// Package vtscreen is as much of a terminal as the CLI's live output
// needs, for its tests: what a person would see after the bytes written.
package vtscreen

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Screen is as much of a terminal as the CLI's output needs, to see
// what a person would see: text, line ends, wrapping at the width, cursor
// up (CSI n A), to a column (CSI n G), erase below (CSI J) and to the end
// of the line (CSI K). Colours (CSI … m) are noted, not shown.
type Screen struct {
	cols     int
	lines    [][]rune
	row, col int
	colored  bool // an SGR sequence set a colour
	pending  []byte
}

// New is a screen cols columns wide.
func New(cols int) *Screen { return &Screen{cols: cols, lines: [][]rune{nil}} }

// Cols is the screen's width.
func (v *Screen) Cols() int { return v.cols }

// Colored reports whether the output set a colour (an SGR sequence).
func (v *Screen) Colored() bool { return v.colored }

// Write takes the bytes the CLI writes to its terminal.
func (v *Screen) Write(p []byte) (int, error) {
	b := append(v.pending, p...)
	v.pending = nil
	for len(b) > 0 {
		switch c := b[0]; {
		case c == '\x1b':
			n, ok := v.escape(b)
			if !ok {
				v.pending = append([]byte(nil), b...)
				return len(p), nil
			}
			b = b[n:]
			continue
		case c == '\r':
			v.col = 0
		case c == '\n':
			v.down()
		case c < 0x20:
			// other controls move nothing here
		default:
			r, n := utf8.DecodeRune(b)
			if r == utf8.RuneError && !utf8.FullRune(b) {
				v.pending = append([]byte(nil), b...)
				return len(p), nil
			}
			v.put(r)
			b = b[n:]
			continue
		}
		b = b[1:]
	}
	return len(p), nil
}

func (v *Screen) down() {
	v.row++
	v.col = 0
	for len(v.lines) <= v.row {
		v.lines = append(v.lines, nil)
	}
}

func (v *Screen) put(r rune) {
	if v.col >= v.cols {
		v.down()
	}
	line := v.lines[v.row]
	for len(line) <= v.col {
		line = append(line, ' ')
	}
	line[v.col] = r
	v.lines[v.row] = line
	v.col++
}

// escape applies the CSI sequence at the start of b and says how long it
// is; ok is false when b ends before the sequence does.
func (v *Screen) escape(b []byte) (n int, ok bool) {
	if len(b) < 2 {
		return 0, false
	}
	if b[1] != '[' {
		return 2, true
	}
	i := 2
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == ';') {
		i++
	}
	if i == len(b) {
		return 0, false
	}
	arg := string(b[2:i])
	num := 1
	if a, err := strconv.Atoi(strings.Split(arg, ";")[0]); err == nil {
		num = a
	}
	switch b[i] {
	case 'A':
		v.row = max(0, v.row-num)
	case 'G':
		v.col = max(0, num-1)
	case 'J':
		v.lines[v.row] = v.cut(v.lines[v.row])
		v.lines = v.lines[:v.row+1]
	case 'K':
		v.lines[v.row] = v.cut(v.lines[v.row])
	case 'm':
		for _, a := range strings.Split(arg, ";") {
			if n, err := strconv.Atoi(a); err == nil && (n >= 30 && n <= 38 || n >= 40 && n <= 48 || n >= 90 && n <= 107) {
				v.colored = true
			}
		}
	}
	return i + 1, true
}

func (v *Screen) cut(line []rune) []rune {
	if len(line) > v.col {
		return line[:v.col]
	}
	return line
}

// String is the screen, its lines without trailing blanks.
func (v *Screen) String() string {
	out := make([]string, len(v.lines))
	for i, l := range v.lines {
		out[i] = strings.TrimRight(string(l), " ")
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}
