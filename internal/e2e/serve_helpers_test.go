package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// serveProc is one run of `sparkles serve` as a process of its own.
type serveProc struct {
	t     testing.TB
	cmd   *exec.Cmd
	url   string
	token string
	hc    *http.Client // for calls, with a timeout
	// streams has no timeout: a stream lasts as long as the server.
	streams *http.Client

	serving chan struct{} // closed once the server listens
	exited  chan struct{} // closed once the process is gone
	code    int           // exit status, once exited; -1 for a signal
	logMu   sync.Mutex
	log     []string // the last lines of its stderr, for failure messages
	lines   chan string
}

// startServe runs `sparkles serve` on dataDir with a loopback port of its
// own choosing, plus args, in the given environment. It returns once the
// process has started; waitServing waits until it listens.
func startServe(t testing.TB, env []string, dataDir, token string, args ...string) *serveProc {
	t.Helper()
	argv := append([]string{"serve", "--data-dir", dataDir, "--addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	if token != "" {
		argv = append(argv, "--token", token)
	}
	cmd := exec.Command(binary, argv...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{
		t: t, cmd: cmd, token: token,
		hc:      &http.Client{Timeout: 10 * time.Second},
		streams: &http.Client{},
		serving: make(chan struct{}),
		exited:  make(chan struct{}),
		lines:   make(chan string, 1024),
	}
	go p.readLog(stderr)
	// A test that fails half-way must not leave a server behind.
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.kill()
		}
	})
	return p
}

// readLog keeps the tail of the server's log, notes when it serves, and
// reaps the process once its stderr closes.
func (p *serveProc) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.logMu.Lock()
		p.log = append(p.log, line)
		if len(p.log) > 200 {
			p.log = p.log[len(p.log)-200:]
		}
		p.logMu.Unlock()
		select {
		case p.lines <- line:
		default:
		}
		var rec struct {
			Msg string `json:"msg"`
			API string `json:"api"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "sparkles is serving" {
			p.url = strings.TrimSuffix(rec.API, "/v1")
			close(p.serving)
		}
	}
	err := p.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		p.code = exit.ExitCode()
	default:
		p.code = -2
	}
	close(p.exited)
}

// logTail returns the last lines the server logged.
func (p *serveProc) logTail() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return strings.Join(p.log, "\n")
}

// waitServing waits until the server listens and fails the test if it
// exits first.
func (p *serveProc) waitServing() {
	p.t.Helper()
	select {
	case <-p.serving:
	case <-p.exited:
		p.t.Fatalf("serve exited with %d before serving:\n%s", p.code, p.logTail())
	case <-time.After(30 * time.Second):
		p.kill()
		p.t.Fatalf("serve did not start serving:\n%s", p.logTail())
	}
}

// kill ends the server with SIGKILL, as a crash would, and waits for it.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// signal sends sig and returns the exit status once the process is gone.
func (p *serveProc) signal(sig syscall.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	return p.wait()
}

// wait returns the exit status once the process is gone.
func (p *serveProc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(30 * time.Second):
		p.kill()
		p.t.Fatalf("serve did not exit:\n%s", p.logTail())
		return 0
	}
}

// waitLog waits for a log line containing s.
func (p *serveProc) waitLog(s string) {
	p.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			p.t.Fatalf("no log line with %q:\n%s", s, p.logTail())
		}
	}
}

// call sends a JSON request and decodes a JSON answer into out (when not
// nil); it returns the status. Transport errors are returned, not fatal:
// callers racing a crash expect them.
func (p *serveProc) call(ctx context.Context, method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", b, err)
		}
	}
	if resp.StatusCode >= 400 {
		// Not an error of the call: the caller judges the status, and a
		// failure shows what the server said.
		return resp.StatusCode, &answerError{body: b}
	}
	return resp.StatusCode, nil
}

// answerError carries the body of an answer of 400 or more.
type answerError struct{ body []byte }

func (e *answerError) Error() string { return "the server answered " + string(bytes.TrimSpace(e.body)) }

// mustCall is call for requests that must succeed with status want.
func (p *serveProc) mustCall(method, path string, body any, want int, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, err := p.call(ctx, method, path, body, out)
	if _, answered := errors.AsType[*answerError](err); answered && status == want {
		err = nil
	}
	if err != nil || status != want {
		p.t.Fatalf("%s %s: status %d, %v; want %d\n%s", method, path, status, err, want, p.logTail())
	}
}

// frame is one SSE frame as read off the wire.
type frame struct {
	id    string // "" when the frame had no id line
	event string
	data  []byte
}

// sseFrames reads SSE frames with a plain bufio reader, the way a minimal
// client would: it trusts nothing beyond the framing of docs/stream.md.
type sseFrames struct {
	r *bufio.Reader
}

func newSSEFrames(r io.Reader) *sseFrames { return &sseFrames{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next frame; comments (pings) are skipped.
func (s *sseFrames) next() (frame, error) {
	var f frame
	var data [][]byte
	for {
		line, err := s.r.ReadBytes('\n')
		if err != nil {
			return frame{}, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			f.data = bytes.Join(data, []byte("\n"))
			return f, nil
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("id: ")):
			f.id = string(line[4:])
		case bytes.HasPrefix(line, []byte("event: ")):
			f.event = string(line[7:])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data, append([]byte(nil), line[6:]...))
		default:
			return frame{}, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// openStream opens the event stream of sandbox id, resuming after cursor
// when it is not nil.
func openStream(ctx context.Context, hc *http.Client, base, token, id string, cursor *uint64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sandboxes/"+id+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if cursor != nil {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*cursor, 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &statusError{status: resp.StatusCode, body: string(b)}
	}
	return resp, nil
}

type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.body) }

// readLog reads the whole retained log of a sandbox through the JSON pages.
func readEventLog(t testing.TB, p *serveProc, id string) []sandbox.Event {
	t.Helper()
	var out []sandbox.Event
	since := "0"
	for {
		var page struct {
			Data      []sandbox.Event `json:"data"`
			HasMore   bool            `json:"has_more"`
			NextSince string          `json:"next_since"`
		}
		p.mustCall(http.MethodGet, "/v1/sandboxes/"+id+"/events?limit=1000&since="+since, nil, http.StatusOK, &page)
		out = append(out, page.Data...)
		if !page.HasMore {
			return out
		}
		since = page.NextSince
	}
}
