package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// replayBatch is how many events one Read of a stream takes. Each Read is a
// short read of the store; a long replay is many of them, written and
// flushed one batch at a time, so the client's pace sets the replay's.
const replayBatch = 256

// stream answers GET /v1/sandboxes/{id}/events/stream (docs/stream.md): a snapshot,
// the replay after the cursor, then the live tail.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
	id := ps.ByName("id")
	o, err := s.openStream(r, id)
	if err != nil {
		return err
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")

	// The stream ends when the client leaves or the server shuts down: one
	// context for both, so that a waiting stream selects on three
	// channels, not four.
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	defer context.AfterFunc(s.ctx, stop)()
	w.WriteHeader(http.StatusOK)
	c := &sseConn{w: w, rc: http.NewResponseController(w), idle: s.cfg.Keepalive, ping: time.NewTimer(s.cfg.Keepalive), flushed: time.Now()}
	defer c.ping.Stop()
	s.cfg.Observer.StreamOpened(o.given)
	defer s.cfg.Observer.StreamClosed()
	// Once the headers are out, failures can only end the stream: the
	// client reconnects with its Last-Event-ID and gets a proper answer.
	err = s.follow(ctx, c, id, o)
	if err != nil {
		level := slog.LevelDebug // the client left: nothing to see
		if ctx.Err() == nil && !isWriteError(err) && !sandbox.IsType(err, sandbox.ECursorPruned) {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "sse: stream ended", "request_id", requestID(w), "sandbox_id", id, "err", err)
	}
	return nil
}

// writeError marks an error of the connection, as opposed to one of the
// store, for the log.
type writeError struct{ err error }

func (e writeError) Error() string { return "write: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

func isWriteError(err error) bool {
	_, ok := errors.AsType[writeError](err)
	return ok
}

// opened is what a stream keeps of the state it starts from. openStream
// reads, checks and encodes the state in a frame of its own, gone before
// the stream waits, so that an idle stream's stack can shrink at GC.
type opened struct {
	cursor         uint64
	given          bool // the client gave a cursor
	status, detail string
	snap           *snapshot // the snapshot frame, shared with other streams
}

// openStream decides every answer that is not a stream (404, 410) while a
// JSON error can still be sent, and reads what the stream starts from.
func (s *Server) openStream(r *http.Request, id string) (*opened, error) {
	cursor, given, err := cursorOf(r)
	if err != nil {
		return nil, err
	}
	// Nothing published after the state is missed: the sandbox's tail is
	// read after it, and then follows every change (see tailView).
	st, err := s.store.State(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if given {
		err := st.Marks().CheckCursor(id, cursor)
		if sandbox.IsType(err, sandbox.ECursorStale) {
			// Beyond the state this process has: on a store that several
			// coordinators share, another may have written more than this
			// one has heard of yet (a client that reconnects to another
			// node at once). Read looks in the store before it calls a
			// cursor stale; once it passes, the state has caught up.
			if _, err := s.store.Read(r.Context(), id, cursor, 1); err != nil {
				return nil, err
			}
			if st, err = s.store.State(r.Context(), id); err != nil {
				return nil, err
			}
			err = st.Marks().CheckCursor(id, cursor)
		}
		if err != nil {
			return nil, err
		}
	} else {
		cursor = uint64(st.Sandbox.LastEventID)
	}
	snap, err := s.snapshots.frame(id, &st)
	if err != nil {
		return nil, err
	}
	return &opened{cursor: cursor, given: given, status: st.Sandbox.Status, detail: st.Sandbox.StatusDetail, snap: snap}, nil
}

// follow writes the snapshot, then every event after the cursor, then the
// live tail, until the client or the server leaves (nil) or something
// fails. Events come from the sandbox's shared tail (sse_tail.go) once the
// stream is within it, and from the store, a page at a time, before.
func (s *Server) follow(ctx context.Context, c *sseConn, id string, o *opened) error {
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.transient(sandbox.TypeSnapshot, o.snap.data); err != nil {
		return err
	}
	o.snap = nil // not needed while the stream waits
	if err := c.flush(); err != nil {
		return err
	}
	t := s.tails.join(s.store, id)
	defer s.tails.leave(t)
	cursor, status, detail := o.cursor, o.status, o.detail
	for {
		// The sandbox as its tail last read it; after each change it is
		// read again, once for all its streams.
		v := t.view.Load()
		if v.err != nil {
			return v.err
		}
		var recs []sandbox.Record
		if cursor < v.base {
			// Behind the tail. A prune that overtakes this reader makes
			// Read fail with cursor_pruned; ending the stream lets the
			// reconnect answer it with a 410 and the watermarks rather
			// than skip events.
			var err error
			if recs, err = s.store.Read(ctx, id, cursor, replayBatch); err != nil {
				return err
			}
			if len(recs) == 0 {
				// Nothing is retained between the cursor and the tail's
				// start, and ids only grow.
				cursor = v.base
			}
		} else {
			recs = v.after(cursor)
		}
		if len(recs) > 0 {
			if err := c.batch(recs); err != nil {
				return err
			}
			s.cfg.Observer.Delivered(len(recs))
			cursor = recs[len(recs)-1].ID
		}
		if h := v.head; h.Status != status || h.Detail != detail {
			status, detail = h.Status, h.Detail
			if err := c.status(id, status, detail); err != nil {
				return err
			}
		}
		if cursor < v.last {
			// More is there at once: read on without waiting, unless the
			// client or the server is leaving.
			if ctx.Err() != nil {
				return nil
			}
			continue
		}

		// Caught up: sleep until the sandbox changes.
		changed := t.changed(v)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-c.ping.C:
				if quiet := time.Since(c.flushed); quiet < c.idle {
					c.ping.Reset(c.idle - quiet) // written to since it was set
					continue
				}
				if err := c.comment("ping"); err != nil {
					return err
				}
				c.ping.Reset(c.idle)
			case <-changed:
				waiting = false
			}
		}
		if changed == v.wake {
			t.after(v)
		}
	}
}

// snapshots shares the encoding of each sandbox's snapshot frame among the
// streams that open while its state does not change. A stream holds its
// snapshot until the client has taken the whole frame, which a client that
// stops reading never does: with an encoding each, 300 such streams on a
// sandbox whose turn has 20,000 tool calls (a 6 MB snapshot) held 1.8 GB
// after a collection (sparkles bench, stall-snapshot). Shared, they hold
// one encoding between them, 20 MB in all, and each stream's own cost is
// the same whatever the snapshot's size (its goroutine and buffers; the
// socket buffers are the kernel's). The cache holds its entries weakly: an
// encoding lives while a stream writes it, and goes at the next collection
// after the last one is done, so an idle sandbox keeps no snapshot in
// memory.
type snapshotCache struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[snapshot] // by sandbox id
}

// snapshot is the encoded snapshot frame of one version of a sandbox's
// state. ready is closed once data or err is set: the streams that ask for
// a version while its first stream encodes it wait for that encoding
// rather than make one each.
type snapshot struct {
	version string
	ready   chan struct{}
	data    []byte
	err     error
}

// versionOf names the version of a state. Every write that changes a
// state either folds events, which moves last_event_id, or changes the
// sandbox resource itself (status, current turn, watermarks, updated_at),
// so the resource, encoded, names its state.
func versionOf(st *sandbox.State) (string, error) {
	b, err := json.Marshal(st.Sandbox)
	if err != nil {
		return "", fmt.Errorf("encode snapshot: %w", err)
	}
	return string(b), nil
}

// frame returns the snapshot frame of sandbox id at state st: the one
// other streams hold for the same version, or a new one.
func (c *snapshotCache) frame(id string, st *sandbox.State) (*snapshot, error) {
	version, err := versionOf(st)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]weak.Pointer[snapshot])
	}
	if sn := c.m[id].Value(); sn != nil && sn.version == version {
		c.mu.Unlock()
		<-sn.ready
		return sn, sn.err
	}
	sn := &snapshot{version: version, ready: make(chan struct{})}
	wp := weak.Make(sn)
	c.m[id] = wp
	c.mu.Unlock()
	// Once no stream holds it the entry goes too, unless a newer version
	// has taken its place.
	runtime.AddCleanup(sn, func(id string) {
		c.mu.Lock()
		if c.m[id] == wp {
			delete(c.m, id)
		}
		c.mu.Unlock()
	}, id)
	sn.data, sn.err = snapshotFrame(id, st)
	close(sn.ready)
	if sn.err != nil {
		c.mu.Lock()
		if c.m[id] == wp {
			delete(c.m, id) // the next stream tries again
		}
		c.mu.Unlock()
	}
	return sn, sn.err
}

// snapshotFrame encodes the data line of the snapshot frame of a state.
func snapshotFrame(id string, st *sandbox.State) ([]byte, error) {
	data, err := json.Marshal(st.Snapshot())
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	turnID := ""
	if t := st.Sandbox.CurrentTurn; t != nil {
		turnID = t.ID
	}
	return sandbox.AppendEnvelope(nil, 0, sandbox.TypeSnapshot, time.Now(), id, turnID, data), nil
}

// sseConn writes the frames of one stream. Its writer is the server's
// responseWriter, which keeps the connection's write deadline at least half
// of WriteTimeout ahead of every write and flush: a client that takes no
// bytes for that long is dropped, while one that reads slowly only holds up its own goroutine,
// blocked in its own write, with nothing queued for it but the socket's and
// the response's buffers.
type sseConn struct {
	w       io.Writer
	rc      *http.ResponseController // its Flush sends what w holds to the client
	idle    time.Duration
	ping    *time.Timer
	flushed time.Time // the last flush
	scratch []byte
}

func (c *sseConn) frame(id uint64, event string, data []byte) error {
	var err error
	if c.scratch, err = writeFrame(c.w, c.scratch, id, event, data); err != nil {
		return writeError{err}
	}
	return nil
}

// batchBuffers hold the frames of one batch on their way to the
// connection, so a replay reaches the socket in large writes rather than
// one small write per frame. A stream holds one only while it writes a
// batch, so idle streams cost none.
var batchBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, batchBufferSize) }}

const batchBufferSize = 32 << 10

// batch writes the frames of recs and flushes them.
func (c *sseConn) batch(recs []sandbox.Record) error {
	bw := batchBuffers.Get().(*bufio.Writer)
	bw.Reset(c.w)
	defer func() {
		bw.Reset(nil)
		batchBuffers.Put(bw)
	}()
	var err error
	for _, rec := range recs {
		if c.scratch, err = writeFrame(bw, c.scratch, rec.ID, string(rec.Type), rec.JSON); err != nil {
			return writeError{err}
		}
	}
	if err := bw.Flush(); err != nil {
		return writeError{err}
	}
	return c.flush()
}

func (c *sseConn) transient(typ sandbox.Type, envelope []byte) error {
	return c.frame(0, string(typ), envelope)
}

func (c *sseConn) status(id, status, detail string) error {
	data, err := json.Marshal(sandbox.SandboxStatus{Status: status, Detail: detail})
	if err != nil {
		return err
	}
	env := sandbox.AppendEnvelope(nil, 0, sandbox.TypeSandboxStatus, time.Now(), id, "", data)
	if err := c.transient(sandbox.TypeSandboxStatus, env); err != nil {
		return err
	}
	return c.flush()
}

func (c *sseConn) comment(text string) error {
	if _, err := io.WriteString(c.w, ": "+text+"\n\n"); err != nil {
		return writeError{err}
	}
	return c.flush()
}

// flush sends what is buffered and notes when, for the keepalive: a ping is
// only due after a quiet interval. The timer is not reset at every flush
// (with 1,000 streams at 200 events/s that was 1 % of the server's CPU);
// when it fires after a write, it is set again for the rest of the
// interval.
func (c *sseConn) flush() error {
	if err := c.rc.Flush(); err != nil {
		return writeError{err}
	}
	c.flushed = time.Now()
	return nil
}

// WriteFrame writes one durable event as an SSE frame: its id, its type as
// the event name, and its stored JSON as data. Line breaks inside the data
// (a store's JSON has none) each start a new data line, so the frame reads
// back as the same JSON with line breaks as "\n".
func WriteFrame(w io.Writer, rec sandbox.Record) error {
	_, err := writeFrame(w, nil, rec.ID, string(rec.Type), rec.JSON)
	return err
}

// smallFrame is the size up to which a frame is assembled in the scratch
// buffer and written in one call; larger data is written in place rather
// than copied, so a stream holds no buffer the size of its largest event.
const smallFrame = 4 << 10

// writeFrame writes a frame with the given id (none when 0), event name and
// data. It returns scratch, grown, for the next frame.
func writeFrame(w io.Writer, scratch []byte, id uint64, event string, data []byte) ([]byte, error) {
	b := scratch[:0]
	if id != 0 {
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, id, 10)
		b = append(b, '\n')
	}
	if event != "" {
		b = append(b, "event: "...)
		if strings.ContainsAny(event, "\r\n") {
			// A line break would end the field and start a forged one.
			event = strings.NewReplacer("\r", "", "\n", "").Replace(event)
		}
		b = append(b, event...)
		b = append(b, '\n')
	}
	if bytes.IndexByte(data, '\n') < 0 && bytes.IndexByte(data, '\r') < 0 {
		b = append(b, "data: "...)
		if len(data) <= smallFrame {
			b = append(b, data...)
			b = append(b, "\n\n"...)
			_, err := w.Write(b)
			return b, err
		}
		if _, err := w.Write(b); err != nil {
			return b, err
		}
		if _, err := w.Write(data); err != nil {
			return b, err
		}
		_, err := io.WriteString(w, "\n\n")
		return b, err
	}
	// Lines may end in "\r\n", "\n" or "\r" (as SSE parsers split them).
	if _, err := w.Write(b); err != nil {
		return b, err
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		line := data
		if i >= 0 {
			line = data[:i]
		}
		if _, err := io.WriteString(w, "data: "); err != nil {
			return b, err
		}
		if _, err := w.Write(line); err != nil {
			return b, err
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return b, err
		}
		if i < 0 {
			break
		}
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	_, err := io.WriteString(w, "\n")
	return b, err
}
