package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Kind tells what a Message of a Stream is.
type Kind int

const (
	// KindEvent is a durable event of the log; Event.ID is its id.
	KindEvent Kind = iota + 1
	// KindSnapshot is the snapshot that starts every connection. On a
	// resumed connection it describes the state as of its LastEventID,
	// which may be ahead of the events delivered so far: the replay of
	// what was missed follows it.
	KindSnapshot
	// KindStatus is a transient sandbox.status frame.
	KindStatus
	// KindGap reports events that retention removed before this reader
	// got them; Gap says which ids.
	KindGap
)

func (k Kind) String() string {
	switch k {
	case KindEvent:
		return "event"
	case KindSnapshot:
		return "snapshot"
	case KindStatus:
		return "status"
	case KindGap:
		return "gap"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Message is one thing a Stream delivers.
type Message struct {
	Kind Kind
	// Event is the decoded envelope (for every kind but KindGap): its Data
	// is a *sandbox.Snapshot, a *sandbox.SandboxStatus or the payload of a
	// durable event.
	Event sandbox.Event
	// Raw is the envelope exactly as the server sent it.
	Raw json.RawMessage
	// Gap is set for KindGap.
	Gap Gap
}

// Gap is a range of event ids, From through To, that retention pruned
// before the reader could read them. Ids are not dense, so the range says
// what may have been lost, not how many events were.
type Gap struct {
	From, To uint64
}

// Since returns a pointer to id, for StreamOptions.Since.
func Since(id uint64) *uint64 { return &id }

// StreamOptions configure a Stream. Zero values take the defaults.
type StreamOptions struct {
	// Since is the cursor to start from: every retained event with a
	// greater id is delivered (Since(0): all that is retained). Nil starts
	// with the live tail after the first snapshot.
	Since *uint64
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts, which doubles from the first to the second with jitter
	// (defaults 100ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout drops a connection on which nothing, not even a
	// keepalive, arrived for that long, and reconnects (default 45s, three
	// of the server's default keepalive intervals; negative disables).
	IdleTimeout time.Duration
	// MaxEventBytes bounds one event (default 64 MiB); a larger one ends
	// the stream with an error.
	MaxEventBytes int
	// OnRetry, when set, is called before each wait to reconnect with the
	// error that ended the last attempt. It runs on the stream's goroutine.
	OnRetry func(err error, wait time.Duration)
	// Logger receives the stream's reconnections at debug level.
	Logger *slog.Logger
}

const (
	defaultMinBackoff    = 100 * time.Millisecond
	defaultMaxBackoff    = 5 * time.Second
	defaultIdleTimeout   = 45 * time.Second
	defaultMaxEventBytes = 64 << 20
	// recoveryPage is the page size of the JSON pages read after a 410.
	recoveryPage = 1000
	// staleRetries is how many times in a row a cursor beyond the log is
	// retried before the stream gives up: a replica of a shared store can
	// lag for a moment, but a log that stays behind what this reader has
	// already delivered was replaced, and resuming would skip or repeat.
	staleRetries = 5
)

// Stream reads the events of one sandbox and keeps reading until its
// context ends, Close is called, or an error that reconnecting cannot fix
// (unauthorized, forbidden, not_found). Across disconnections and server
// restarts it reconnects with its last delivered id as Last-Event-ID, so
// the durable events it delivers are the log in order, each id once.
type Stream struct {
	c    *Client
	id   string
	opts StreamOptions
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	out    chan Message
	done   chan struct{}
	err    error // why the stream ended; set before done is closed

	last       atomic.Uint64 // the highest id delivered (or the cursor)
	haveCursor bool          // last is a cursor the server knows of
	retry      time.Duration // the server's retry field, if it sent one

	mu   sync.Mutex
	snap *sandbox.Snapshot
}

// Stream starts reading the events of sandbox id in the background. Take
// them with Next or Events; end with Close or by ending ctx.
func (c *Client) Stream(ctx context.Context, id string, opts StreamOptions) *Stream {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = defaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = defaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.MaxEventBytes <= 0 {
		opts.MaxEventBytes = defaultMaxEventBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stream{
		c: c, id: id, opts: opts,
		log:  log.With("sandbox_id", id),
		out:  make(chan Message),
		done: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if opts.Since != nil {
		s.last.Store(*opts.Since)
		s.haveCursor = true
	}
	go s.run()
	return s
}

// Next returns the next message. After the stream ended it returns why:
// the context's error after Close or the end of the stream's context, an
// *Error the server answered that reconnecting cannot fix, or a protocol
// error.
func (s *Stream) Next(ctx context.Context) (Message, error) {
	select {
	case m := <-s.out:
		return m, nil
	case <-s.done:
		return Message{}, s.err
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// Events iterates over the messages until the stream ends, yielding the
// error that ended it last. Leaving the loop early does not close the
// stream.
func (s *Stream) Events() iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		for {
			m, err := s.Next(context.Background())
			if err != nil {
				yield(Message{}, err)
				return
			}
			if !yield(m, nil) {
				return
			}
		}
	}
}

// Snapshot returns the latest snapshot the stream received, and false
// before the first one.
func (s *Stream) Snapshot() (sandbox.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil {
		return sandbox.Snapshot{}, false
	}
	return *s.snap, true
}

// LastEventID returns the id of the last durable event delivered: the
// cursor the stream resumes from.
func (s *Stream) LastEventID() uint64 { return s.last.Load() }

// Close ends the stream and waits for its goroutine.
func (s *Stream) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *Stream) run() {
	defer close(s.done)
	attempt, stale := 0, 0
	for {
		connected, err := s.connect()
		if s.ctx.Err() != nil {
			s.err = s.ctx.Err()
			return
		}
		if connected {
			attempt = 0
		}
		if e, ok := errors.AsType[*Error](err); ok && (e.Type == sandbox.ECursorPruned || e.Type == sandbox.ECursorStale) {
			if e.Type == sandbox.ECursorStale {
				stale++
			}
			err = s.catchUp(e, stale)
			if p, ok := errors.AsType[*permanentError](err); ok {
				s.err = p.err
				return
			}
			if err == nil {
				if e.Type == sandbox.ECursorPruned {
					stale = 0
				}
				continue // resume at once from what the pages delivered
			}
		} else if connected {
			stale = 0
		}
		if s.ctx.Err() != nil {
			s.err = s.ctx.Err()
			return
		}
		if !retryable(err) {
			s.err = err
			return
		}
		wait := s.backoff(attempt)
		attempt++
		s.log.Debug("event stream: reconnecting", "err", err, "wait", wait, "last_event_id", s.last.Load())
		if s.opts.OnRetry != nil {
			s.opts.OnRetry(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			s.err = s.ctx.Err()
			return
		case <-t.C:
		}
	}
}

// retryable tells whether reconnecting may cure err: the server is down or
// restarting, the connection broke, or the server failed on its side.
func retryable(err error) bool {
	if err == nil {
		return true
	}
	if e, ok := errors.AsType[*Error](err); ok {
		switch {
		case e.Type == sandbox.ECursorStale:
			return true // catchUp has not given up on it yet
		case e.Status >= 500, e.Status == http.StatusRequestTimeout, e.Status == http.StatusTooManyRequests:
			return true
		}
		return false
	}
	if errors.Is(err, errEventTooLarge) || errors.Is(err, errDecode) {
		return false
	}
	return true
}

// backoff returns the wait before reconnection attempt n: the minimum
// doubled n times, capped, with jitter in its upper half, so that readers
// of a restarted server do not all come back at once.
func (s *Stream) backoff(n int) time.Duration {
	lo := s.opts.MinBackoff
	if s.retry > lo {
		lo = min(s.retry, s.opts.MaxBackoff)
	}
	d := lo
	for i := 0; i < n && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opts.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// errDecode marks an event the reader could not decode: a server that
// breaks the contract, which reconnecting would only repeat.
var errDecode = errors.New("event stream: undecodable event")

// connect runs one connection until it ends. connected reports whether it
// got as far as the snapshot, which resets the backoff.
func (s *Stream) connect() (connected bool, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	req, err := s.c.newRequest(ctx, http.MethodGet, s.c.endpoint(nil, "v1", "sandboxes", s.id, "events", "stream"), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if s.haveCursor {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(s.last.Load(), 10))
	}
	resp, err := s.c.send(req, http.StatusOK)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, &Error{Status: resp.StatusCode, Type: sandbox.EInternal,
			Message: fmt.Sprintf("the stream answered %q instead of text/event-stream", resp.Header.Get("Content-Type"))}
	}

	body := &idleReader{r: resp.Body, d: s.opts.IdleTimeout}
	if s.opts.IdleTimeout > 0 {
		body.t = time.AfterFunc(s.opts.IdleTimeout, func() { body.fired.Store(true); cancel() })
		defer body.t.Stop()
	}
	p := newSSEReader(body, s.opts.MaxEventBytes)
	for {
		ev, err := p.Next()
		if p.retry > 0 {
			s.retry = p.retry
		}
		if err != nil {
			if body.fired.Load() {
				err = fmt.Errorf("event stream: nothing received for %v", s.opts.IdleTimeout)
			}
			return connected, err
		}
		// A consumer that takes its time is not an idle server: the timer
		// pauses while a message waits to be taken.
		if body.t != nil {
			body.t.Stop()
		}
		snap, err := s.handle(ev)
		if body.t != nil {
			body.t.Reset(s.opts.IdleTimeout)
		}
		if snap {
			connected = true
		}
		if err != nil {
			return connected, err
		}
	}
}

// handle decodes one frame and delivers it unless it is a durable event
// already delivered. snap reports a snapshot frame.
func (s *Stream) handle(ev sseEvent) (snap bool, err error) {
	var e sandbox.Event
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return false, fmt.Errorf("%w: %s frame: %v", errDecode, ev.Type, err)
	}
	raw := json.RawMessage(ev.Data)
	switch {
	case e.Type == sandbox.TypeSnapshot:
		sn, _ := e.Data.(*sandbox.Snapshot)
		if sn == nil {
			return false, fmt.Errorf("%w: snapshot frame without data", errDecode)
		}
		s.mu.Lock()
		s.snap = sn
		s.mu.Unlock()
		if !s.haveCursor {
			// The live tail starts after the first snapshot; from here on
			// a reconnection resumes instead of skipping ahead.
			s.last.Store(uint64(sn.LastEventID))
			s.haveCursor = true
		}
		return true, s.deliver(Message{Kind: KindSnapshot, Event: e, Raw: raw})
	case e.Type == sandbox.TypeSandboxStatus:
		return false, s.deliver(Message{Kind: KindStatus, Event: e, Raw: raw})
	case e.ID == 0:
		// A transient frame of a newer server: nothing to resume from, and
		// nothing this reader can describe to its consumer.
		s.log.Debug("event stream: skipping unknown transient frame", "type", e.Type)
		return false, nil
	}
	return false, s.deliverEvent(e, raw)
}

// deliverEvent delivers a durable event unless its id was delivered
// already: a replay after a reconnection overlaps what came before.
func (s *Stream) deliverEvent(e sandbox.Event, raw json.RawMessage) error {
	if e.ID <= s.last.Load() {
		return nil
	}
	// The id is recorded before the hand-over, so a consumer that asks for
	// LastEventID right after receiving the event sees it. A hand-over
	// fails only when the stream is closing, and a closed stream never
	// resumes from that id.
	prev := s.last.Swap(e.ID)
	if err := s.deliver(Message{Kind: KindEvent, Event: e, Raw: raw}); err != nil {
		s.last.Store(prev)
		return err
	}
	s.haveCursor = true
	return nil
}

func (s *Stream) deliver(m Message) error {
	select {
	case s.out <- m:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// catchUp answers a 410 as docs/stream.md describes: read the sandbox and the
// JSON pages from the cursor and deliver what the stream missed. When
// retention passed the cursor, the pages start from what is retained, and
// what was pruned is reported as a Gap. nil means the stream can resume.
func (s *Stream) catchUp(e *Error, stale int) error {
	sb, err := s.c.GetSandbox(s.ctx, s.id)
	if err != nil {
		return err
	}
	last := s.last.Load()
	if e.Type == sandbox.ECursorStale && uint64(sb.LastEventID) < last {
		if stale >= staleRetries {
			return &permanentError{&Error{Status: e.Status, Type: e.Type, RequestID: e.RequestID,
				OldestEventID: uint64(sb.OldestEventID), PrunedThrough: uint64(sb.PrunedThrough), LastEventID: uint64(sb.LastEventID),
				Message: fmt.Sprintf("the server's log of sandbox %s ends at event %d, before event %d that this reader already delivered; "+
					"the log was replaced, so the stream cannot resume", s.id, sb.LastEventID, last)}}
		}
		return e // maybe a lagging replica: retry after a wait
	}
	cursor := last
	page, err := s.c.Events(s.ctx, s.id, cursor, recoveryPage)
	if pe, ok := errors.AsType[*Error](err); ok && pe.Type == sandbox.ECursorPruned {
		through := max(pe.PrunedThrough, uint64(sb.PrunedThrough), e.PrunedThrough)
		if err := s.deliver(Message{Kind: KindGap, Gap: Gap{From: last + 1, To: through}}); err != nil {
			return err
		}
		// Nothing at or below the pruned mark exists any more; resuming
		// from it is what "what is retained" means.
		s.last.Store(max(last, through))
		cursor = 0
		page, err = s.c.Events(s.ctx, s.id, cursor, recoveryPage)
	}
	for {
		if err != nil {
			return err
		}
		for i, ev := range page.Events {
			if err := s.deliverEvent(ev, page.Raw[i]); err != nil {
				return err
			}
		}
		if !page.HasMore || page.NextSince <= cursor {
			return nil
		}
		cursor = page.NextSince
		page, err = s.c.Events(s.ctx, s.id, cursor, recoveryPage)
	}
}

// permanentError ends the stream with err, whatever its type.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// idleReader restarts the idle timer whenever bytes arrive.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 && r.t != nil {
		r.t.Reset(r.d)
	}
	return n, err
}
