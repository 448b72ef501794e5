// Package server is the HTTP side of Sparkles: routing, bearer auth, the
// mapping of sandbox errors to statuses, the JSON pages and the SSE stream of
// docs/api.md and docs/stream.md. It holds no state of its own beyond connections; every
// answer comes from its Backend (the coordinator) or, for reads, its Store.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Backend is what the HTTP layer needs of the coordinator: the calls that
// change a sandbox or reach its agent, its workspace or its node.
// internal/coordinator's Coordinator is the implementation.
type Backend interface {
	CreateSandbox(ctx context.Context, p sandbox.CreateParams) (sandbox.Sandbox, error)
	DeleteSandbox(ctx context.Context, id string) (sandbox.Sandbox, error)
	SetConfig(ctx context.Context, id string, ch sandbox.ConfigChange) (sandbox.Sandbox, error)
	StartTurn(ctx context.Context, id, input string) (sandbox.Turn, error)
	QueueTurn(ctx context.Context, id, input string) (sandbox.Turn, error)
	StartTurnInput(ctx context.Context, id string, input []sandbox.InputBlock, queue bool) (sandbox.Turn, error)
	Turn(ctx context.Context, id, turnID string) (sandbox.Turn, error)
	CancelTurn(ctx context.Context, id, turnID string) (sandbox.Turn, error)
	Decide(ctx context.Context, id, approvalID string, d sandbox.Decision) (sandbox.Approval, error)
	Agents(ctx context.Context) ([]sandbox.Agent, error)
	CheckAgent(ctx context.Context, name string) (sandbox.AgentCheck, error)
	// Files opens a sandbox's workspace for one request; its Room asks
	// the sandbox's disk limits.
	Files(ctx context.Context, id string) (sandbox.Files, error)
	Diff(ctx context.Context, id, turnID string, w io.Writer) error
	Revert(ctx context.Context, id, turnID string) (sandbox.Sandbox, error)
	AgentLog(ctx context.Context, id string) (sandbox.AgentLog, error)
	// Holder says where a sandbox's workspace is: here, or the base URL
	// of the node to proxy its requests to (forward.go).
	Holder(ctx context.Context, id string) (url string, here bool, err error)
}

// Store is what the HTTP layer reads of the store itself, the read side
// of sandbox.Store: the sandboxes, their snapshots and their logs, and the
// wake-ups a stream waits on. Every node of a cluster reads the one store.
type Store interface {
	Sandbox(ctx context.Context, id string) (sandbox.Sandbox, error)
	Sandboxes(ctx context.Context, after string, limit int) ([]sandbox.Sandbox, bool, error)
	State(ctx context.Context, id string) (sandbox.State, error)
	Read(ctx context.Context, id string, after uint64, limit int) ([]sandbox.Record, error)
	Head(id string) (sandbox.Head, error)
	Wait(id string) <-chan struct{}
}

var _ Store = sandbox.Store(nil)

// Config is what a Server needs. Zero durations take the defaults.
type Config struct {
	Backend Backend
	// Store is the store the Backend writes, read directly.
	Store Store
	// Token is the server bearer token. Every /v1 call must carry it or a
	// stream token derived from it; an empty Token admits no call at all.
	Token string
	// Keepalive is the interval of SSE pings on an idle stream (0: DefaultKeepalive).
	Keepalive time.Duration
	Logger    *slog.Logger
	// Static, when set, serves every path outside /v1 and /healthz without
	// auth (the web page).
	Static http.Handler
	// WriteTimeout bounds how long any single write may wait on a client
	// that accepts no bytes (default 1m; a write gets between half of it
	// and all of it, see responseWriter). It is a per-write deadline, not a
	// limit on a response's length, so a replay of any length still
	// completes for a client that keeps reading.
	WriteTimeout time.Duration
	// BodyTimeout bounds the reading of a request's body (default 30s):
	// a client that trickles its body is answered 400 and let go.
	BodyTimeout time.Duration
	// TurnImageMax is the decoded size one image of a turn's input may
	// have (--turn-image-max-size; 0 is sandbox.DefaultTurnImageMax).
	// A turn's body may hold turnBodyImages of them besides the 1 MiB of
	// any other body.
	TurnImageMax int64
	// Metrics, when set, is served at /metrics to holders of the server
	// token (the Prometheus text format; scrapers send the bearer token).
	Metrics http.Handler
	// Ready, when set, is asked by /readyz: nil means ready (the store is
	// open, the retention loop runs). /readyz needs no token, like /healthz.
	Ready func() error
	// Isolation names what confines the agents' processes, for /readyz:
	// e.g. "landlock+namespaces; limits: cgroup1", or "off"; it is asked
	// at each request, as the server may begin to serve before it is known.
	Isolation func() string
	// Observer is told about streams, for metrics; nil observes nothing.
	Observer Observer
	// CORSOrigins are the browser origins (scheme://host[:port]) allowed
	// to call the API from their pages; see cors.go. Empty sends no CORS
	// header at all.
	CORSOrigins []string
	// MaxConnections caps the connections open at once, and
	// MaxUnauthenticatedConnections those of them that have shown no
	// valid token yet, each of which gets UnauthenticatedIdleTimeout for
	// every wait on its client (zero values take the defaults; see
	// connlimit.go). They apply to the listener Serve is given.
	MaxConnections                int
	MaxUnauthenticatedConnections int
	UnauthenticatedIdleTimeout    time.Duration
	// Webhooks, when set, serves /v1/webhooks (webhooks.go).
	Webhooks Webhooks
	// LogRequests logs each answered request at INFO; without it they are
	// logged at DEBUG, and those answered 5xx at WARN either way.
	LogRequests bool
}

// Observer is told what the streams do.
type Observer interface {
	StreamOpened(replay bool)
	StreamClosed()
	Delivered(n int)
}

type nopObserver struct{}

func (nopObserver) StreamOpened(bool) {}
func (nopObserver) StreamClosed()     {}
func (nopObserver) Delivered(int)     {}

// Server answers the HTTP API. It is an http.Handler; Listen, Serve and
// Shutdown run it on a listener of its own.
type Server struct {
	cfg    Config
	b      Backend
	store  Store
	log    *slog.Logger
	router *httprouter.Router
	cors   corsPolicy
	// routes are the /v1 routes as registered, kept so that tests can walk
	// every one of them.
	routes []route

	// ctx ends every SSE stream when the server shuts down; streams never
	// end on their own otherwise.
	ctx    context.Context
	cancel context.CancelFunc

	httpSrv  *http.Server
	shutOnce sync.Once

	readyMu  sync.Mutex
	readyRun *readyRun // the Ready check in progress, shared by every /readyz that waits

	snapshots snapshotCache // see sse.go
	tails     tails         // see sse_tail.go
	conns     *connLimiter  // see connlimit.go
}

// Body and timing limits.
const (
	maxBodyBytes = 1 << 20
	// turnBodyImages is how many images of the largest size one turn's
	// body has room for, in base64.
	turnBodyImages = 4
	// defaultBodyTimeout bounds the reading of a request body: 1 MiB at
	// most, which any client that means it sends in far less.
	defaultBodyTimeout = 30 * time.Second
	readHeaderTimeout  = 10 * time.Second
	idleTimeout        = 2 * time.Minute
)

// DefaultKeepalive is the interval of SSE pings on an idle stream when
// Config.Keepalive is zero.
const DefaultKeepalive = 15 * time.Second

// New returns a Server over cfg.Backend and cfg.Store.
func New(cfg Config) *Server {
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = time.Minute
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = defaultBodyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, b: cfg.Backend, store: cfg.Store, log: cfg.Logger, ctx: ctx, cancel: cancel, cors: newCORSPolicy(cfg.CORSOrigins),
		conns: newConnLimiter(cfg, cfg.Logger)}
	s.router = s.newRouter()
	s.httpSrv = &http.Server{
		Handler:     s,
		ConnState:   s.conns.connState,
		ConnContext: withConn,
		// No WriteTimeout: streams last as long as their clients stay. Each
		// response bounds its own writes instead (see Config.WriteTimeout).
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// route is one /v1 route: its method and httprouter path, who may call it,
// and its handler.
type route struct {
	method string
	path   string
	access access
	handle handlerFunc
}

// handlerFunc answers one request; an error it returns is answered by
// writeError, so handlers only write on success.
type handlerFunc func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error

func (s *Server) newRouter() *httprouter.Router {
	s.routes = []route{
		{http.MethodPost, "/v1/sandboxes", accessFull, s.createSandbox},
		{http.MethodGet, "/v1/sandboxes", accessFull, s.listSandboxes},
		{http.MethodGet, "/v1/sandboxes/:id", accessRead, s.getSandbox},
		{http.MethodDelete, "/v1/sandboxes/:id", accessFull, s.deleteSandbox},
		{http.MethodPatch, "/v1/sandboxes/:id", accessFull, s.patchSandbox},
		{http.MethodPost, "/v1/sandboxes/:id/turns", accessFull, s.startTurn},
		{http.MethodGet, "/v1/sandboxes/:id/turns/:turn_id", accessFull, s.getTurn},
		{http.MethodPost, "/v1/sandboxes/:id/turns/:turn_id/cancel", accessFull, s.cancelTurn},
		{http.MethodGet, "/v1/sandboxes/:id/turns/:turn_id/diff", accessFull, s.atHolder(s.getDiff)},
		{http.MethodPost, "/v1/sandboxes/:id/turns/:turn_id/revert", accessFull, s.revertTurn},
		{http.MethodGet, "/v1/sandboxes/:id/files", accessFull, s.atHolder(s.getFile)},
		{http.MethodGet, "/v1/sandboxes/:id/files/*path", accessFull, s.atHolder(s.getFile)},
		{http.MethodPut, "/v1/sandboxes/:id/files/*path", accessFull, s.atHolder(s.putFile)},
		{http.MethodDelete, "/v1/sandboxes/:id/files/*path", accessFull, s.atHolder(s.deleteFile)},
		{http.MethodGet, "/v1/sandboxes/:id/archive", accessFull, s.atHolder(s.getArchive)},
		{http.MethodPut, "/v1/sandboxes/:id/archive", accessFull, s.atHolder(s.putArchive)},
		{http.MethodGet, "/v1/sandboxes/:id/logs", accessFull, s.atHolder(s.getLogs)},
		{http.MethodPost, "/v1/sandboxes/:id/approvals/:approval_id", accessFull, s.decide},
		{http.MethodGet, "/v1/sandboxes/:id/events", accessRead, s.eventsPage},
		{http.MethodGet, "/v1/sandboxes/:id/events/stream", accessRead, s.stream},
		{http.MethodGet, "/v1/agents", accessFull, s.listAgents},
		{http.MethodGet, "/v1/agents/:name/check", accessFull, s.checkAgent},
		{http.MethodGet, "/v1/openapi.json", accessFull, s.openAPI},
	}
	s.routes = append(s.routes, s.webhookRoutes()...)
	if s.cfg.Metrics != nil {
		s.routes = append(s.routes, route{http.MethodGet, "/metrics", accessFull, s.metrics})
	}
	rt := httprouter.New()
	// Redirects would answer with HTML and hide typos; a wrong path is a
	// plain 404 of the API instead.
	rt.RedirectTrailingSlash = false
	rt.RedirectFixedPath = false
	rt.GlobalOPTIONS = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	rt.NotFound = http.HandlerFunc(s.notFound)
	rt.MethodNotAllowed = http.HandlerFunc(s.methodNotAllowed)
	rt.PanicHandler = s.panicked
	for _, rte := range s.routes {
		rt.Handle(rte.method, rte.path, s.guard(rte))
	}
	rt.GET("/healthz", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	rt.GET("/readyz", s.readyz)
	return rt
}

// routerPaths are the paths outside /v1 that the router answers rather
// than the static page.
func routerPath(p string) bool {
	return isAPIPath(p) || p == "/healthz" || p == "/readyz" || p == "/metrics"
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ httprouter.Params) error {
	s.cfg.Metrics.ServeHTTP(w, r)
	return nil
}

// readyz answers 200 when the server can do its work, 503 with the reason
// otherwise, so an orchestrator stops sending traffic to a node that cannot.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.cfg.Ready != nil {
		if err := s.ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error(), "isolation": s.isolation()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "isolation": s.isolation()})
}

// isolation is Config.Isolation's answer, "" without one.
func (s *Server) isolation() string {
	if s.cfg.Isolation == nil {
		return ""
	}
	return s.cfg.Isolation()
}

// readyTimeout bounds how long /readyz waits for the Ready check: an
// orchestrator's probe gives up after a second, and a check stuck on a
// store that does not answer is itself the answer.
const readyTimeout = 800 * time.Millisecond

// readyRun is one run of the Ready check; err is set when done closes.
type readyRun struct {
	done chan struct{}
	err  error
}

// ready runs the Ready check, at most one at a time: a request that comes
// while one runs waits for that one, so a check stuck on the store is
// not run again by every probe. It answers within readyTimeout.
func (s *Server) ready(ctx context.Context) error {
	s.readyMu.Lock()
	run := s.readyRun
	if run == nil {
		run = &readyRun{done: make(chan struct{})}
		s.readyRun = run
		go func() {
			run.err = s.cfg.Ready()
			s.readyMu.Lock()
			s.readyRun = nil
			s.readyMu.Unlock()
			close(run.done)
		}()
	}
	s.readyMu.Unlock()
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case <-run.done:
		return run.err
	case <-t.C:
		return fmt.Errorf("the readiness check did not finish within %s: the store does not answer; see the server log", readyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// guard authenticates a request for its route and answers the handler's
// error, if any.
func (s *Server) guard(rte route) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		err := s.authorize(r, rte.access, ps.ByName("id"))
		if err == nil {
			err = rte.handle(w, r, ps)
		}
		if err != nil {
			s.writeError(w, r, err)
		}
	}
}

func isAPIPath(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	// Under /v1 a caller without a token learns nothing, not even which
	// paths exist.
	if isAPIPath(r.URL.Path) {
		if _, err := s.authenticate(r); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.writeError(w, r, sandbox.Errorf(sandbox.ENotFound, "no route for %s %s", r.Method, r.URL.Path))
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if isAPIPath(r.URL.Path) {
		if _, err := s.authenticate(r); err != nil {
			w.Header().Del("Allow")
			s.writeError(w, r, err)
			return
		}
	}
	// The one answer whose status is not its type's: docs/errors.md has no type of
	// its own for a wrong method.
	writeJSON(w, http.StatusMethodNotAllowed, errorEnvelope{errorBody{Type: sandbox.EInvalidRequest, Message: fmt.Sprintf(
		"method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, w.Header().Get("Allow"))}})
}

func (s *Server) panicked(w http.ResponseWriter, r *http.Request, v any) {
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.log.Error("handler panic", "request_id", requestID(w), "method", r.Method, "path", r.URL.Path, "panic", v)
	if rw, ok := w.(*responseWriter); ok && rw.wrote {
		return // too late for an error body; the client sees a cut answer
	}
	writeJSON(w, http.StatusInternalServerError, errorEnvelope{errorBody{Type: sandbox.EInternal, Message: internalMessage}})
}

// ServeHTTP answers one request: a request id, the route (or the static
// page), and a log line at the end.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rid := r.Header.Get("X-Request-Id")
	if !validRequestID(rid) {
		rid = sandbox.NewID("req_")
	}
	w.Header().Set("X-Request-Id", rid)
	rw := &responseWriter{ResponseWriter: w, requestID: rid, rc: http.NewResponseController(w), deadline: writeDeadline{timeout: s.cfg.WriteTimeout}, bodyTimeout: s.cfg.BodyTimeout}
	// A stream that ended on a kept-alive connection leaves its deadline
	// behind; until this answer's first write sets its own, there is none.
	_ = rw.rc.SetWriteDeadline(time.Time{})
	s.noteToken(rw, r)

	switch {
	case s.cors.handle(rw, r): // a preflight, answered
	case s.cfg.Static != nil && !routerPath(r.URL.Path):
		s.cfg.Static.ServeHTTP(rw, r)
	default:
		s.router.ServeHTTP(rw, r)
	}

	status := rw.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []any{"request_id", rid, "method", r.Method, "path", r.URL.Path,
		"status", status, "bytes", rw.bytes, "duration", time.Since(start)}
	if id := pathSandboxID(r.URL.Path); id != "" {
		attrs = append(attrs, "sandbox_id", id)
	}
	// A console polls and every stream reconnects, so a line per request
	// at INFO scrolls the operator's terminal; a server error is worth a
	// look whatever the level.
	level := slog.LevelDebug
	switch {
	case status >= http.StatusInternalServerError:
		level = slog.LevelWarn
	case s.cfg.LogRequests:
		level = slog.LevelInfo
	}
	s.log.Log(r.Context(), level, "http request", attrs...)
}

// pathSandboxID is the sandbox a /v1/sandboxes/{id}... path names, or "".
func pathSandboxID(p string) string {
	rest, ok := strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// validRequestID accepts a caller's request id only when it is short and
// plain, so it can be echoed and logged safely.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// responseWriter records the status and size of an answer for the log, and
// bounds every write: http.Server has no WriteTimeout (streams are long), so
// each Write moves the connection's write deadline to now+timeout instead,
// unless the deadline already set leaves more than half of that: moving it
// is a timer update, and a stream writes and flushes every delivery. So a
// write gets between timeout/2 and timeout. A client that takes no bytes
// for that long is dropped; one that keeps reading is never cut short, and
// a slow handler does not eat into the time its answer has to be written.
// It unwraps to the connection's writer so http.ResponseController reaches
// Flush and SetWriteDeadline.
type responseWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	// bodyTimeout bounds reading the request body (see decodeBody).
	bodyTimeout time.Duration
	deadline    writeDeadline
	requestID   string
	status      int
	bytes       int64
	wrote       bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	w.extend()
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *responseWriter) extend() {
	if at, moved := w.deadline.extend(); moved {
		// A writer without deadlines (a recorder in tests) works without one.
		_ = w.rc.SetWriteDeadline(at)
	}
}

// writeDeadline is a response's write deadline. It moves only when less
// than half of the timeout is left, not at every write.
type writeDeadline struct {
	timeout time.Duration
	at      time.Time
}

// extend returns the deadline, and whether it moved and must be set.
func (d *writeDeadline) extend() (time.Time, bool) {
	now := time.Now()
	if d.at.Sub(now) > d.timeout/2 {
		return d.at, false
	}
	d.at = now.Add(d.timeout)
	return d.at, true
}

// FlushError is what http.ResponseController.Flush calls: a flush is a
// write to the connection like any other.
func (w *responseWriter) FlushError() error {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	w.extend()
	return w.rc.Flush()
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func requestID(w http.ResponseWriter) string {
	if rw, ok := w.(*responseWriter); ok {
		return rw.requestID
	}
	return ""
}

// Serve answers connections on l until Shutdown; it returns nil after a
// Shutdown and the listener's error otherwise.
func (s *Server) Serve(l net.Listener) error {
	err := s.httpSrv.Serve(s.conns.listener(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown ends every SSE stream, then stops accepting requests and waits
// for those in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	// Streams never go idle by themselves, so http.Server.Shutdown would wait
	// on them forever; end them first.
	s.cancel()
	var err error
	s.shutOnce.Do(func() { err = s.httpSrv.Shutdown(ctx) })
	return err
}
