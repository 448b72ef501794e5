package server

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Connection caps. Anything local can open connections to the API (an
// agent's processes on an open network among them), and each one holds a
// descriptor, a goroutine and buffers: a process that held 4,096 idle
// keep-alive connections, or 19,975 against a limit of 20,000 open files,
// left the operator's calls waiting and a create failing for want of a
// descriptor. So the server counts its connections, and those that have
// not yet shown a valid token (the server token or a stream token) apart:
//
//   - At most MaxConnections are open, and at most
//     MaxUnauthenticatedConnections of them have shown no token. A
//     connection that shows one on any request counts as authenticated
//     for the rest of its life.
//   - At a cap, a new connection takes the place of the one that has been
//     idle longest (waiting for its first request, or for the next one on
//     a keep-alive): one without a token; at the global cap, else an idle
//     authenticated keep-alive, whose client reconnects. A stream is never
//     idle. Where none is idle, the new connection is answered 503
//     unavailable and closed at once. So a flood of idle connections
//     without a token cannot keep the operator out: the operator's
//     connection takes an idle one's place and, once it shows the token,
//     no longer competes with them. Blocking the accept instead (as
//     golang.org/x/net/netutil.LimitListener does) would leave the
//     operator queued behind the flood.
//   - A connection without a token gets UnauthenticatedIdleTimeout for
//     every wait on its client: for its request's header and body, and
//     between requests; an idle keep-alive goes after it, not after the
//     server's 2 minutes. A request without a valid token that sends a
//     body is answered with Connection: close, so that no handler's
//     answer waits on reading a body for a client that has no business
//     sending one.
//
// The defaults: a server is built for 1,000 streams of one sandbox and
// more (BENCHMARKS.md: fanout, and 10,000 idle streams in the idle
// scenario), about 25 KiB each, so 16,384 connections (some 400 MiB) leave
// room above that; within the open-file limit, less a reserve for the
// store, the agents' pipes and the workspace's files. A legitimate client
// is without a token only between its connect and its first request (or
// on the console's static files, /healthz and /readyz), so 1,024 is far
// above what clients need at once, and enough that a connection the
// operator opens is not pushed out by 1,024 newer ones before its first
// request is read.
const (
	DefaultMaxConnections                = 16384
	DefaultMaxUnauthenticatedConnections = 1024
	DefaultUnauthenticatedIdleTimeout    = 5 * time.Second
	// fileReserve is the open files kept out of the connection cap: the
	// store's, the agents' pipes and logs (DefaultMaxAgents of 64, a
	// handful each), and files the workspace API opens.
	fileReserve = 1024
)

// connLimiter enforces the caps on the connections of one listener.
type connLimiter struct {
	max, maxUnauth int
	idleTimeout    time.Duration
	log            *slog.Logger
	limitNote      string // why max is below the configured cap, or ""

	mu            sync.Mutex
	total, unauth int
	// idle lists the idle connections, the one idle longest first.
	idleUnauth, idleAuth list.List
	evicted, refused     int       // since the last log line
	logged               time.Time // of the last log line
	// refusing bounds the goroutines that answer refused connections.
	refusing chan struct{}
}

func newConnLimiter(cfg Config, log *slog.Logger) *connLimiter {
	l := &connLimiter{
		max:         cfg.MaxConnections,
		maxUnauth:   cfg.MaxUnauthenticatedConnections,
		idleTimeout: cfg.UnauthenticatedIdleTimeout,
		log:         log,
		refusing:    make(chan struct{}, 64),
	}
	if l.max <= 0 {
		l.max = DefaultMaxConnections
	}
	if l.maxUnauth <= 0 {
		l.maxUnauth = DefaultMaxUnauthenticatedConnections
	}
	if l.idleTimeout <= 0 {
		l.idleTimeout = DefaultUnauthenticatedIdleTimeout
	}
	// Connections and the server's own files share the open-file limit:
	// with the cap above it, a flood left nothing for the store, the
	// agents' pipes or a new sandbox's files. The reserve stays theirs.
	if files := openFileLimit(); files > 0 {
		if room := files - min(fileReserve, files/4); l.max > room {
			l.limitNote = fmt.Sprintf("lowered from %d to fit the open-file limit of %d (ulimit -n)", l.max, files)
			l.max = room
		}
	}
	l.maxUnauth = min(l.maxUnauth, l.max)
	return l
}

// listener wraps ln so that every connection it accepts is counted.
func (l *connLimiter) listener(ln net.Listener) net.Listener {
	attrs := []any{"max_connections", l.max, "max_unauthenticated_connections", l.maxUnauth, "unauthenticated_idle_timeout", l.idleTimeout}
	if l.limitNote != "" {
		l.log.Warn("connection cap "+l.limitNote, attrs...)
	} else {
		l.log.Debug("connection caps", attrs...)
	}
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := ll.l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// trackedConn is an accepted connection as the caps count it.
type trackedConn struct {
	net.Conn
	l      *connLimiter
	authed atomic.Bool // set under l.mu

	// Under l.mu.
	gone bool          // closed or evicted: no longer counted
	elem *list.Element // in an idle list, or nil

	dmu    sync.Mutex
	want   time.Time // the read deadline net/http asked for
	doomed bool      // reads fail at once: its request is not to be read on
}

// admit counts c in, making room at a cap by evicting the connection idle
// longest, or refuses it (nil).
func (l *connLimiter) admit(c net.Conn) *trackedConn {
	l.mu.Lock()
	needUnauth, needTotal := l.unauth >= l.maxUnauth, l.total >= l.max
	var victim *trackedConn
	if needUnauth || needTotal {
		victim = front(&l.idleUnauth)
		if victim == nil && !needUnauth {
			victim = front(&l.idleAuth)
		}
		if victim == nil {
			msg := fmt.Sprintf("the server holds its maximum of %d connections (--max-connections), none of them idle; try again shortly", l.max)
			if needUnauth {
				msg = fmt.Sprintf("the server holds its maximum of %d connections that have shown no token (--max-unauthenticated-connections), none of them idle; try again shortly", l.maxUnauth)
			}
			l.refused++
			l.noteLocked()
			l.mu.Unlock()
			l.refuse(c, msg)
			return nil
		}
		l.dropLocked(victim)
		l.evicted++
		l.noteLocked()
	}
	tc := &trackedConn{Conn: c, l: l}
	l.total++
	l.unauth++
	tc.elem = l.idleUnauth.PushBack(tc)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	// net/http sets the header's deadline before it reads; this one holds
	// should it not.
	_ = tc.SetReadDeadline(time.Time{})
	return tc
}

func front(idle *list.List) *trackedConn {
	if e := idle.Front(); e != nil {
		return e.Value.(*trackedConn)
	}
	return nil
}

// dropLocked stops counting c.
func (l *connLimiter) dropLocked(c *trackedConn) {
	c.gone = true
	l.total--
	if !c.authed.Load() {
		l.unauth--
	}
	l.unlistLocked(c)
}

func (l *connLimiter) unlistLocked(c *trackedConn) {
	if c.elem == nil {
		return
	}
	if c.authed.Load() {
		l.idleAuth.Remove(c.elem)
	} else {
		l.idleUnauth.Remove(c.elem)
	}
	c.elem = nil
}

// noteLocked logs, at most once a minute, that a cap was reached: a
// flood would otherwise log a line per connection.
func (l *connLimiter) noteLocked() {
	if now := time.Now(); now.Sub(l.logged) >= time.Minute {
		l.log.Warn("connection cap reached: idle connections were closed to make room, or new ones refused",
			"evicted", l.evicted, "refused", l.refused, "open", l.total, "unauthenticated", l.unauth,
			"max_connections", l.max, "max_unauthenticated_connections", l.maxUnauth)
		l.logged, l.evicted, l.refused = now, 0, 0
	}
}

// refuse answers c 503 with an error of docs/errors.md and closes it, without
// waiting: a few goroutines write the answers, and a connection that
// comes while they are all busy is closed without one.
func (l *connLimiter) refuse(c net.Conn, msg string) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		body := fmt.Sprintf(`{"error":{"type":%q,"message":%q}}`, sandbox.EUnavailable, msg)
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s", len(body), body)
		// Close only once the client has what was written: closing with its
		// request unread would reset the connection and lose the answer.
		if cw, ok := c.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
		_ = c.Close()
	}()
}

// connState follows net/http's view of a connection: idle (new, or
// between requests) or not.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.gone {
		return
	}
	switch st {
	case http.StateIdle:
		l.unlistLocked(tc)
		if tc.authed.Load() {
			tc.elem = l.idleAuth.PushBack(tc)
		} else {
			tc.elem = l.idleUnauth.PushBack(tc)
		}
	case http.StateActive, http.StateHijacked:
		l.unlistLocked(tc)
	}
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	if !c.gone {
		c.l.dropLocked(c)
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// SetReadDeadline sets net/http's deadline, but no later than the idle
// timeout from now until the connection has shown a token.
func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.want = t
	if c.doomed {
		t = time.Unix(1, 0)
	} else if !c.authed.Load() {
		if limit := time.Now().Add(c.l.idleTimeout); t.IsZero() || t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite is the socket's, which net/http uses to close a connection
// without losing its last answer.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// doom makes every read fail at once, so that net/http reads nothing more
// of the connection (not the rest of a body) and closes it after the answer.
func (c *trackedConn) doom() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.doomed = true
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
}

func (c *trackedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// authenticate counts c as a connection that showed a valid token, and
// gives it back the deadline net/http asked for.
func (c *trackedConn) authenticate() {
	l := c.l
	l.mu.Lock()
	if c.authed.Load() {
		l.mu.Unlock()
		return
	}
	idle := c.elem != nil
	l.unlistLocked(c)
	c.authed.Store(true)
	if !c.gone {
		l.unauth--
		if idle {
			c.elem = l.idleAuth.PushBack(c)
		}
	}
	l.mu.Unlock()
	c.dmu.Lock()
	_ = c.Conn.SetReadDeadline(c.want)
	c.dmu.Unlock()
}

type connKey struct{}

// withConn is http.Server's ConnContext: it lets a request find its
// connection.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// noteToken marks the request's connection authenticated when the request
// shows a valid token, on the connection's first request that does. A
// request without one that sends a body closes its connection after the
// answer, and its body is never read: net/http would read up to 256 KiB
// of it after the answer to keep the connection, holding it busy for as
// long as a client takes to send it.
func (s *Server) noteToken(w http.ResponseWriter, r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(*trackedConn)
	if !ok || c.authed.Load() {
		return
	}
	if _, err := s.authenticate(r); err == nil {
		c.authenticate()
	} else if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		c.doom()
	}
}
