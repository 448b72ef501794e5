package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// floodArg makes the test binary a local process that floods the API with
// idle connections, as a hostile agent did: it opens n connections to
// addr, sends each a request without a token (so the server keeps it as
// an idle keep-alive), says "ready", and holds them until its stdin closes.
// A process of its own, so that its descriptors are not the server's.
const floodArg = "-conn-flood"

func init() {
	if len(os.Args) == 4 && os.Args[1] == floodArg {
		n, _ := strconv.Atoi(os.Args[3])
		flood(os.Args[2], n)
		os.Exit(0)
	}
}

func flood(addr string, n int) {
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		// Answers are read and dropped; one the server closes just ends.
		go func() { _, _ = io.Copy(io.Discard, c) }()
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: sparkles\r\n\r\n")
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// capped is a server on 127.0.0.1 with cfg's caps, over a coordinator
// without agents.
type capped struct {
	srv  *Server
	addr string
	url  string
}

func startCapped(t *testing.T, cfg Config) *capped {
	t.Helper()
	st := bolttest.MustOpen(t)
	coord, err := coordinator.New(coordinator.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend, cfg.Store, cfg.Token = &testBackend{Coordinator: coord, store: st}, st, testToken
	srv := New(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		coord.Close()
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &capped{srv: srv, addr: l.Addr().String(), url: "http://" + l.Addr().String()}
}

// counts are the connections the server counts, all and without a token.
func (c *capped) counts() (total, unauth int) {
	l := c.srv.conns
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.unauth
}

// waitIdleLast waits until the server lists rc's connection as idle, the
// one idle the shortest: net/http marks a connection idle after it wrote
// the answer, which the client may read first, so the order of two
// connections answered one after the other is the server's to settle.
func (c *capped) waitIdleLast(t *testing.T, rc *rawClient) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		l := c.srv.conns
		l.mu.Lock()
		e := l.idleUnauth.Back()
		last := e != nil && e.Value.(*trackedConn).RemoteAddr().String() == rc.c.LocalAddr().String()
		l.mu.Unlock()
		if last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %s is not the last idle one", rc.c.LocalAddr())
		}
		runtime.Gosched()
	}
}

// rawClient is a client connection that sends requests by hand, so a test
// knows which connection each one goes on.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

// get sends a GET on the connection and reads its answer, or returns why
// it could not.
func (rc *rawClient) get(path, token string) (response, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://sparkles"+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	_ = rc.c.SetDeadline(time.Now().Add(waitFor))
	if err := req.Write(rc.c); err != nil {
		return response{}, err
	}
	resp, err := http.ReadResponse(rc.br, req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (rc *rawClient) mustGet(path, token string, want int) {
	rc.t.Helper()
	resp, err := rc.get(path, token)
	if err != nil {
		rc.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.status != want {
		rc.t.Fatalf("GET %s: status %d, want %d: %s", path, resp.status, want, resp.body)
	}
}

// closedByServer waits, up to waitFor, for the server to close the
// connection: true when it did, false when it stayed open.
func (rc *rawClient) closedByServer() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(waitFor))
	_, err := rc.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnCapsFlood holds 4,000 idle connections without a token from
// another process against a server whose open files are few, as a
// hostile agent held the API's: /healthz and the operator's create still
// get through, and the server holds no more than its cap. Without the
// caps the server ran out of descriptors and the operator's connection
// waited in the accept queue.
func TestConnCapsFlood(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// The flood process raises its own soft limit to the hard one.
	n := 4000
	if lim.Max < uint64(n+256) {
		n = int(lim.Max) - 256
	}
	files := uint64(n / 2)
	low := syscall.Rlimit{Cur: files, Max: lim.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })

	// A long idle timeout: only the caps free connections here.
	s := startCapped(t, Config{UnauthenticatedIdleTimeout: time.Hour})
	if got, want := s.srv.conns.max, int(files)-int(files)/4; got != want {
		t.Fatalf("connection cap %d with %d open files, want %d", got, files, want)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, floodArg, s.addr, strconv.Itoa(n))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the flood did not start: %q, %v", line, err)
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	start := time.Now()
	resp, err := client.Get(s.url + "/healthz")
	if err != nil {
		t.Fatalf("/healthz under the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz under the flood: status %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("create under the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create under the flood: status %d", resp.StatusCode)
	}
	total, unauth := s.counts()
	if unauth > DefaultMaxUnauthenticatedConnections || total > s.srv.conns.max {
		t.Fatalf("the server holds %d connections, %d without a token; caps %d and %d", total, unauth, s.srv.conns.max, DefaultMaxUnauthenticatedConnections)
	}
	t.Logf("flood of %d from another process, %d open files: /healthz and a create took %v; the server holds %d connections, %d without a token",
		n, files, time.Since(start), total, unauth)
}

// TestConnCapsEvictOldestIdle fills the cap on connections without a
// token: each new one takes the place of the one idle longest, and a
// connection that showed a token is never taken.
func TestConnCapsEvictOldestIdle(t *testing.T) {
	const unauthCap = 8
	s := startCapped(t, Config{MaxUnauthenticatedConnections: unauthCap, UnauthenticatedIdleTimeout: time.Hour})
	owner := dialRaw(t, s.addr)
	owner.mustGet("/v1/sandboxes", testToken, http.StatusOK)
	idle := make([]*rawClient, unauthCap)
	for i := range idle {
		idle[i] = dialRaw(t, s.addr)
		idle[i].mustGet("/healthz", "", http.StatusOK)
		s.waitIdleLast(t, idle[i])
	}
	if total, unauth := s.counts(); total != unauthCap+1 || unauth != unauthCap {
		t.Fatalf("%d connections, %d without a token; want %d and %d", total, unauth, unauthCap+1, unauthCap)
	}
	for i := range 3 {
		rc := dialRaw(t, s.addr)
		rc.mustGet("/healthz", "", http.StatusOK)
		if !idle[i].closedByServer() {
			t.Fatalf("connection %d, idle longest, stayed open", i)
		}
		// The server marks a connection idle after the client has read
		// its answer: wait for it, so that it is not marked after idle[3].
		s.waitIdleLast(t, rc)
	}
	idle[3].mustGet("/healthz", "", http.StatusOK) // now idle the shortest
	s.waitIdleLast(t, idle[3])
	dialRaw(t, s.addr).mustGet("/healthz", "", http.StatusOK)
	if !idle[4].closedByServer() {
		t.Fatal("the connection idle longest stayed open")
	}
	idle[3].mustGet("/healthz", "", http.StatusOK)
	owner.mustGet("/v1/sandboxes", testToken, http.StatusOK)
}

// TestConnCapsRefuseWhenNoneIdle fills the global cap with streams, which
// are never idle: the next connection is answered 503 unavailable in the
// shape of docs/errors.md and closed; once a stream ends, connections are served
// again.
func TestConnCapsRefuseWhenNoneIdle(t *testing.T) {
	const capAll = 3
	s := startCapped(t, Config{MaxConnections: capAll})
	h := &harness{t: t, token: testToken, url: s.url, client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	id := h.createSandbox().ID
	// The create's connection is closed, but may still be counted a
	// moment, as busy: a stream would be refused for it.
	waitUntil(t, func() bool { total, _ := s.counts(); return total == 0 })
	streams := make([]*stream, capAll)
	for i := range streams {
		streams[i] = h.openStream(id, "", nil)
		streams[i].snapshot()
	}
	rc := dialRaw(t, s.addr)
	resp, err := rc.get("/healthz", "")
	if err != nil {
		t.Fatal(err)
	}
	e := resp.fails(t, http.StatusServiceUnavailable, sandbox.EUnavailable)
	if !strings.Contains(e.Error.Message, "--max-connections") {
		t.Fatalf("the message does not name the cap: %q", e.Error.Message)
	}
	if !rc.closedByServer() {
		t.Fatal("the refused connection stayed open")
	}
	streams[0].close()
	waitUntil(t, func() bool { total, _ := s.counts(); return total < capAll })
	dialRaw(t, s.addr).mustGet("/healthz", "", http.StatusOK)
}

// TestConnCapsIdleUnauthenticated: a keep-alive that showed no token is
// closed after the short idle timeout; one that showed a token, idle
// longer, and a stream are not.
func TestConnCapsIdleUnauthenticated(t *testing.T) {
	s := startCapped(t, Config{UnauthenticatedIdleTimeout: 200 * time.Millisecond, Keepalive: 20 * time.Millisecond})
	h := &harness{t: t, token: testToken, url: s.url, client: &http.Client{Transport: &http.Transport{}}}
	id := h.createSandbox().ID
	st := h.openStream(id, "", nil)
	st.snapshot()
	owner := dialRaw(t, s.addr)
	owner.mustGet("/v1/sandboxes", testToken, http.StatusOK)
	anon := dialRaw(t, s.addr)
	anon.mustGet("/healthz", "", http.StatusOK)
	if !anon.closedByServer() {
		t.Fatal("an idle keep-alive without a token stayed open")
	}
	// Both went idle before it did.
	owner.mustGet("/v1/sandboxes", testToken, http.StatusOK)
	drain(st)
	if f := st.next(); !f.isNote || f.comment != "ping" {
		t.Fatalf("stream: %+v, want a ping", f)
	}
}

// TestConnCapsBodyWithoutToken: a request without a valid token that
// sends a body is answered and its connection closed, its body unread.
func TestConnCapsBodyWithoutToken(t *testing.T) {
	s := startCapped(t, Config{UnauthenticatedIdleTimeout: time.Hour})
	rc := dialRaw(t, s.addr)
	// A body announced but never sent: the answer must not wait for it.
	_ = rc.c.SetDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(rc.c, "POST /v1/sandboxes HTTP/1.1\r\nHost: sparkles\r\nAuthorization: Bearer wrong\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	response{status: resp.StatusCode, body: b}.fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
	if !resp.Close {
		t.Fatal("the answer keeps the connection alive")
	}
	if !rc.closedByServer() {
		t.Fatal("the connection stayed open")
	}
}

// drain discards the frames a stream has already received.
func drain(s *stream) {
	for {
		select {
		case <-s.frames:
		default:
			return
		}
	}
}

// waitUntil polls cond until it holds, failing the test after waitFor.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within", waitFor)
		}
		time.Sleep(time.Millisecond)
	}
}
