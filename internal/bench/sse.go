package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// stream is one SSE connection of the benchmark's client. It speaks HTTP/1.1
// over a plain TCP connection rather than through http.Client, so that a
// thousand subscribers cost the client one goroutine and two buffers each,
// and the figures are the server's, not a transport's.
type stream struct {
	conn net.Conn
	body *bufio.Reader // the response body, de-chunked
	buf  []byte        // a line that did not fit the reader's buffer
	data []byte        // the current frame's data, copied out of the buffers
	name []byte        // the current frame's event name, likewise
}

// frame is one SSE frame. event and data are the stream's: they are valid
// until the next call to next.
type frame struct {
	id    uint64
	event []byte
	data  []byte
}

// openStream connects to the stream of sandbox id, after cursor since when
// since >= 0, and returns once the snapshot frame has been read, so the
// server has taken the stream's wake-up channel and nothing appended from
// then on can be missed. bufSize bounds the client's read buffers.
func openStream(ctx context.Context, addr, token, id string, since int64, bufSize int) (*stream, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s, err := startStream(ctx, conn, token, id, since, bufSize)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func startStream(ctx context.Context, conn net.Conn, token, id string, since int64, bufSize int) (*stream, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write(streamRequest(conn.RemoteAddr().String(), token, id, since)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(conn, bufSize)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("stream of %s: status %d: %s", id, resp.StatusCode, bytes.TrimSpace(b))
	}
	s := &stream{conn: conn, body: bufio.NewReaderSize(resp.Body, bufSize)}
	f, err := s.next()
	if err != nil {
		return nil, fmt.Errorf("stream of %s: reading the snapshot: %w", id, err)
	}
	if string(f.event) != "snapshot" {
		return nil, fmt.Errorf("stream of %s: first frame is %q, not a snapshot", id, f.event)
	}
	_ = conn.SetDeadline(time.Time{})
	return s, nil
}

// streamRequest is the request of a stream, as a browser's fetch-based
// reader would send it.
func streamRequest(host, token, id string, since int64) []byte {
	b := []byte("GET /v1/sandboxes/" + id + "/events/stream")
	if since >= 0 {
		b = append(b, "?since="...)
		b = strconv.AppendInt(b, since, 10)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nAuthorization: Bearer "...)
	b = append(b, token...)
	b = append(b, "\r\nAccept: text/event-stream\r\n\r\n"...)
	return b
}

// closeOnDone closes the stream when ctx ends, which ends a blocked next.
func (s *stream) closeOnDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { s.conn.Close() })
}

func (s *stream) Close() error { return s.conn.Close() }

// next returns the next frame; comments (pings) are skipped. The server's
// frames have one data line (its JSON has no line breaks), which is all
// this reader handles.
func (s *stream) next() (frame, error) {
	var f frame
	for {
		line, err := s.line()
		if err != nil {
			return frame{}, err
		}
		switch {
		case len(line) == 0:
			if f.data != nil {
				return f, nil
			}
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("id: ")):
			id, err := strconv.ParseUint(string(line[4:]), 10, 64)
			if err != nil {
				return frame{}, fmt.Errorf("bad id line %q", line)
			}
			f.id = id
		case bytes.HasPrefix(line, []byte("event: ")):
			s.name = append(s.name[:0], line[7:]...)
			f.event = s.name
		case bytes.HasPrefix(line, []byte("data: ")):
			// The line is only valid until the next read: the blank line
			// that ends the frame may refill the buffer.
			s.data = append(s.data[:0], line[6:]...)
			f.data = s.data
		default:
			return frame{}, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// line returns the next line without its line end. It aliases the reader's
// buffer, or s.buf for a line longer than the buffer.
func (s *stream) line() ([]byte, error) {
	line, err := s.body.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.buf = append(s.buf[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.body.ReadSlice('\n')
			s.buf = append(s.buf, line...)
		}
		line = s.buf
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

// stampMarker prefixes the append time carried in a benchmark event's text.
var stampMarker = []byte("bench:")

// stampOf returns the append time carried by an event's data, in
// nanoseconds since the Unix epoch, and whether there was one.
func stampOf(data []byte) (int64, bool) {
	i := bytes.Index(data, stampMarker)
	if i < 0 {
		return 0, false
	}
	var v int64
	digits := 0
	for _, c := range data[i+len(stampMarker):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
		digits++
	}
	return v, digits > 0
}
