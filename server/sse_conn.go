package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// An SSE stream over HTTP/1.1 takes its connection from net/http once its
// headers are decided, and writes its chunks itself: a flush is one write
// of one chunk, whatever its size. Through net/http a flush went through
// the response's 2 KiB buffer, the chunked writer and the connection's
// 4 KiB buffer, and a batch larger than that reached the socket in two
// writes or more. With 1,000 subscribers of a sandbox at 200 events/s
// (sparkles bench, fanout, server in a child process), those were a
// fifth of the streams' write syscalls (1.33 of 6.33 s of the server's
// profile), and net/http's layers took about another second of the 10.6.
// A stream that cannot be taken (HTTP/2, a writer that is not a
// connection) writes through the ResponseWriter as before.
//
// Once taken, net/http no longer watches the connection, so the stream
// reads it itself to learn that the client left, ends the body with the
// last chunk and closes the connection when it ends (the response says
// Connection: close), and the server's Shutdown waits for it.

// hijacked is the connection of a stream taken from net/http.
type hijacked struct {
	conn     net.Conn
	head     []byte // the status line and headers, sent with the first flush
	buf      []byte // chunkReserve bytes, then the frames since the last flush
	deadline writeDeadline
	bytes    *int64 // the response's byte count, for the request log
}

// chunkReserve leads buf: room for a chunk's size line (up to 8 hex digits
// and CRLF), written in front of the frames at the flush so that a chunk
// is sent without copying it.
const chunkReserve = 10

// chunkBuffers hold the frames of a stream between two flushes; a stream
// holds one only while it writes, so an idle stream holds none.
var chunkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// hijack takes the connection of an HTTP/1.1 response, after its headers
// are set and before anything is written, with the status line and
// headers ready to go with the first flush. It returns nil where that
// cannot be done; the response is then untouched. left is called when the
// client closes the connection (it ends the stream).
func (s *Server) hijack(w http.ResponseWriter, r *http.Request, left func()) *hijacked {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return nil
	}
	// The head is the response's headers and the three net/http would have
	// added, written before the hijack and sent with the first flush.
	h := w.Header().Clone()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	head := headerBuffer("HTTP/1.1 200 OK\r\n")
	if err := h.Write(&head); err != nil {
		return nil
	}
	head = append(head, "\r\n"...)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	hj := &hijacked{conn: conn, head: head, deadline: writeDeadline{timeout: s.cfg.WriteTimeout}}
	if rw, ok := w.(*responseWriter); ok {
		rw.status, rw.wrote = http.StatusOK, true
		hj.bytes = &rw.bytes
	}
	_ = conn.SetDeadline(time.Time{})
	go watchClose(conn, brw.Reader, left)
	return hj
}

// takeConn hijacks the stream's connection (hijack) unless the server is
// shutting down; a stream that took it must call s.taken.Done when it
// ends. Shutdown waits for those, since http.Server.Shutdown does not.
func (s *Server) takeConn(w http.ResponseWriter, r *http.Request, left func()) *hijacked {
	s.takenMu.Lock()
	defer s.takenMu.Unlock()
	if s.ctx.Err() != nil {
		return nil
	}
	hj := s.hijack(w, r, left)
	if hj != nil {
		s.taken.Add(1)
	}
	return hj
}

// waitTaken waits until every stream that took its connection has ended,
// or ctx ends. Shutdown calls it once s.ctx is cancelled under takenMu, so
// no stream takes one after.
func (s *Server) waitTaken(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.taken.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// headerBuffer collects http.Header.Write's output.
type headerBuffer []byte

func (b *headerBuffer) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}

// watchClose reads the connection until the client closes it (or sends
// what an SSE client never sends, which is discarded) and then calls
// left, which ends the stream. It returns when the stream closes the
// connection.
func watchClose(conn net.Conn, br *bufio.Reader, left func()) {
	defer left()
	if n := br.Buffered(); n > 0 {
		_, _ = br.Discard(n)
	}
	var b [1]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}

// Write adds p to the chunk being written. Data larger than smallFrame
// (a large snapshot) is sent at once as a chunk of its own, not copied:
// a client that stops reading then holds no copy of it in the stream.
func (h *hijacked) Write(p []byte) (int, error) {
	if len(p) > smallFrame {
		if err := h.flush(); err != nil {
			return 0, err
		}
		size := strconv.AppendUint(make([]byte, 0, chunkReserve), uint64(len(p)), 16)
		bufs := net.Buffers{append(size, "\r\n"...), p, []byte("\r\n")}
		h.extend()
		n, err := bufs.WriteTo(rawConn(h.conn))
		h.count(n)
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if h.buf == nil {
		h.buf = (*chunkBuffers.Get().(*[]byte))[:chunkReserve]
	}
	h.buf = append(h.buf, p...)
	if len(h.buf) >= batchBufferSize {
		// A long replay goes out in chunks of about this size.
		return len(p), h.flush()
	}
	return len(p), nil
}

// flush sends the head, if not yet sent, and the frames written since the
// last flush as one chunk, in one write.
func (h *hijacked) flush() error {
	var out []byte
	if len(h.buf) > chunkReserve {
		var size [chunkReserve]byte
		line := append(strconv.AppendUint(size[:0], uint64(len(h.buf)-chunkReserve), 16), "\r\n"...)
		start := chunkReserve - len(line)
		copy(h.buf[start:], line)
		h.buf = append(h.buf, "\r\n"...)
		out = h.buf[start:]
	}
	if h.head != nil {
		out = append(h.head, out...)
		h.head = nil
	}
	if len(out) == 0 {
		return nil
	}
	h.extend()
	n, err := h.conn.Write(out)
	h.count(int64(n))
	if b := h.buf; b != nil {
		h.buf = nil
		if cap(b) <= 64<<10 {
			b = b[:0]
			chunkBuffers.Put(&b)
		}
	}
	return err
}

// close ends the body with the last chunk and closes the connection.
func (h *hijacked) close() {
	if h.head == nil {
		h.extend()
		_, _ = h.conn.Write([]byte("0\r\n\r\n"))
	}
	_ = h.conn.Close()
}

// extend moves the connection's write deadline when it is due to move.
func (h *hijacked) extend() {
	if at, moved := h.deadline.extend(); moved {
		_ = h.conn.SetWriteDeadline(at)
	}
}

func (h *hijacked) count(n int64) {
	if h.bytes != nil {
		*h.bytes += n
	}
}
