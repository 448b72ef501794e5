package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// sseEvent is one dispatched event of an event stream.
type sseEvent struct {
	// ID is the stream's last event ID as of this event: set by this
	// event's id field or inherited from an earlier one, as the HTML
	// standard defines it. HasID tells whether this event had its own.
	ID    string
	HasID bool
	Type  string // "message" when the event named none
	Data  []byte
}

// errEventTooLarge ends a stream whose event exceeds the reader's bound.
var errEventTooLarge = errors.New("event stream: event larger than the limit")

// sseReader parses text/event-stream as the HTML standard's "Parsing an
// event stream" does: lines end in CRLF, LF or CR; a line that starts with a
// colon is a comment; a line without a colon is a field with an empty
// value; one space after the colon is dropped; data lines join with LF; an
// empty line dispatches; an event without data is not dispatched; an event
// cut off by the end of the stream is discarded.
type sseReader struct {
	r   *bufio.Reader
	max int // bound on one line and on one event's data

	// retry is the reconnection time of the last retry field, 0 if none.
	retry time.Duration

	lastID  string
	started bool // the optional BOM has been checked
	skipLF  bool // the last line ended in CR: a following LF belongs to it
	line    []byte
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// Next returns the next dispatched event. At the end of the stream it
// returns io.EOF, whatever was left incomplete.
func (p *sseReader) Next() (sseEvent, error) {
	var (
		ev      sseEvent
		data    []byte
		hasData bool
	)
	for {
		line, err := p.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if !hasData {
				// No data: the buffers reset and nothing is dispatched.
				ev = sseEvent{}
				continue
			}
			ev.ID = p.lastID
			if ev.Type == "" {
				ev.Type = "message"
			}
			ev.Data = data[:len(data)-1] // the final LF of the last data line
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "event":
			ev.Type = string(value)
		case "data":
			if len(data)+len(value)+1 > p.max {
				return sseEvent{}, fmt.Errorf("%w (%d bytes)", errEventTooLarge, p.max)
			}
			data = append(data, value...)
			data = append(data, '\n')
			hasData = true
		case "id":
			// An id with NULL is ignored, so a stream cannot plant one.
			if bytes.IndexByte(value, 0) < 0 {
				p.lastID = string(value)
				ev.HasID = true
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil && isDigits(value) {
				p.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// bom is the UTF-8 byte order mark a stream may start with.
var bom = []byte("\xEF\xBB\xBF")

// readLine returns the next line without its terminator. The slice is
// valid until the next call. A line is returned as soon as its terminator
// arrives: after a CR it does not wait to see whether an LF follows, so a
// stream that ends its lines in CR alone is never held back.
func (p *sseReader) readLine() ([]byte, error) {
	p.line = p.line[:0]
	for {
		if _, err := p.r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) && len(p.line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		buf, _ := p.r.Peek(p.r.Buffered())
		if p.skipLF {
			p.skipLF = false
			if buf[0] == '\n' {
				p.r.Discard(1)
				continue
			}
		}
		if !p.started {
			p.started = true
			if len(buf) < len(bom) && bytes.HasPrefix(bom, buf) {
				// The start of a BOM: wait for the rest of it.
				buf, _ = p.r.Peek(len(bom))
			}
			if bytes.HasPrefix(buf, bom) {
				p.r.Discard(len(bom))
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		n := i
		if i < 0 {
			n = len(buf)
		}
		if len(p.line)+n > p.max {
			return nil, fmt.Errorf("%w (%d bytes)", errEventTooLarge, p.max)
		}
		p.line = append(p.line, buf[:n]...)
		if i < 0 {
			p.r.Discard(n)
			continue
		}
		p.skipLF = buf[i] == '\r'
		p.r.Discard(i + 1)
		return p.line, nil
	}
}
