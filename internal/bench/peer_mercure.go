package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The Mercure side of the peer scenario: the mercure-peer process
// (internal/bench/mercure), its publishers and its SSE subscribers.

// mercurePeer is a running mercure-peer process.
type mercurePeer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	lines  chan string // of stdout, after the first
	exited chan struct{}
	stderr *tailBuffer
	addr   string
	db     string // its bolt file
	token  string // a publisher JWT
}

// peer starts mercure-peer on a fresh directory; stop ends it and removes
// the directory.
func (r *runner) peer(ctx context.Context) (p *mercurePeer, stop func(), err error) {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return nil, nil, err
	}
	if p, err = startPeer(ctx, r.cfg.PeerMercure, filepath.Join(dir, "mercure.db")); err != nil {
		cleanup()
		return nil, nil, err
	}
	return p, func() { p.close(); cleanup() }, nil
}

func startPeer(ctx context.Context, path, db string) (*mercurePeer, error) {
	key := newToken()
	cmd := exec.Command(path, "-addr", "127.0.0.1:0", "-db", db, "-publisher-key", key, "-stdin")
	p := &mercurePeer{cmd: cmd, exited: make(chan struct{}), stderr: &tailBuffer{}, db: db, token: publisherJWT(key)}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(out)
	p.lines = make(chan string, 1)
	go func() {
		defer close(p.exited)
		for {
			line, err := p.out.ReadString('\n')
			if err != nil {
				_ = cmd.Wait()
				return
			}
			p.lines <- strings.TrimSpace(line)
		}
	}()
	if p.addr, err = p.line(ctx); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *mercurePeer) line(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.exited:
		return "", fmt.Errorf("mercure-peer exited: %s", p.stderr)
	case <-ctx.Done():
		return "", fmt.Errorf("mercure-peer: %w", ctx.Err())
	}
}

// settledMem asks the peer to collect garbage and reports its memory.
func (p *mercurePeer) settledMem(ctx context.Context) (procMem, error) {
	if _, err := io.WriteString(p.in, "gc\n"); err != nil {
		return procMem{}, fmt.Errorf("mercure-peer: %w: %s", err, p.stderr)
	}
	if l, err := p.line(ctx); err != nil || l != "ok" {
		return procMem{}, fmt.Errorf("mercure-peer answered %q to gc: %v", l, err)
	}
	return readProcMem(p.cmd.Process.Pid)
}

// close ends the peer: its stdin closes and it exits; one that does not
// within a while is killed.
func (p *mercurePeer) close() {
	p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// publisherJWT returns an HS256 JWT signed with key that lets its bearer
// publish to every topic.
func publisherJWT(key string) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc.EncodeToString([]byte(`{"mercure":{"publish":["*"]}}`))
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(head))
	return head + "." + enc.EncodeToString(mac.Sum(nil))
}

func peerTopic(i int) string { return "urn:sparkles-bench:topic:" + strconv.Itoa(i) }

// stampedPayload is a JSON text of size bytes that carries the time it was
// made, as newEvent's text does.
func stampedPayload(size int) string {
	var b strings.Builder
	b.Grow(max(size, 64))
	fmt.Fprintf(&b, `{"text":"%s%d `, stampMarker, time.Now().UnixNano())
	const filler = "All work and no play makes Jack a dull boy. "
	for b.Len() < size-2 {
		b.WriteString(filler[:min(len(filler), size-2-b.Len())])
	}
	b.WriteString(`"}`)
	return b.String()
}

// mercurePublisher posts updates to the hub over keep-alive connections,
// up to conns of them.
type mercurePublisher struct {
	hc    *http.Client
	url   string
	token string
}

func (p *mercurePeer) publisher(conns int) *mercurePublisher {
	return &mercurePublisher{
		hc: &http.Client{Transport: &http.Transport{
			DisableCompression:  true,
			MaxIdleConns:        conns + 16,
			MaxIdleConnsPerHost: conns + 16,
		}},
		url:   "http://" + p.addr + "/.well-known/mercure",
		token: p.token,
	}
}

func (p *mercurePublisher) close() { p.hc.CloseIdleConnections() }

// publish posts one update and returns its id once the hub answered 200,
// which it does after the transport committed it.
func (p *mercurePublisher) publish(ctx context.Context, topic, data string) (string, error) {
	form := url.Values{"topic": {topic}, "data": {data}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("publish: status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return string(body), nil
}

// openMercure subscribes to topic, after lastEventID when it is not empty,
// and returns once the hub sent its response headers: it sends them once
// the subscriber is registered and its history queued, so nothing
// published from then on can be missed.
func openMercure(ctx context.Context, addr, topic, lastEventID string, bufSize int) (*stream, error) {
	s, _, err := openMercureAfter(ctx, addr, topic, lastEventID, bufSize)
	return s, err
}

// openMercureAfter is openMercure that also returns the hub's
// Last-Event-ID header: the id its history starts after, "earliest" when it
// did not find the one asked for.
func openMercureAfter(ctx context.Context, addr, topic, lastEventID string, bufSize int) (*stream, string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	q := "topic=" + url.QueryEscape(topic)
	if lastEventID != "" {
		q += "&lastEventID=" + url.QueryEscape(lastEventID)
	}
	req := "GET /.well-known/mercure?" + q + " HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, "", err
	}
	br := bufio.NewReaderSize(conn, bufSize)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		conn.Close()
		return nil, "", fmt.Errorf("subscribe to %s: status %d: %s", topic, resp.StatusCode, bytes.TrimSpace(b))
	}
	_ = conn.SetDeadline(time.Time{})
	return &stream{conn: conn, body: bufio.NewReaderSize(resp.Body, bufSize)}, resp.Header.Get("Last-Event-Id"), nil
}

// nextMercure returns the id and data of the next update of a Mercure
// stream; comments (the hub's first bytes, heartbeats) are skipped. Both
// are valid until the next call.
func (s *stream) nextMercure() (id, data []byte, err error) {
	got := false
	for {
		line, err := s.line()
		if err != nil {
			return nil, nil, err
		}
		switch {
		case len(line) == 0:
			if got {
				return s.name, s.data, nil
			}
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("id: ")):
			s.name = append(s.name[:0], line[4:]...)
		case bytes.HasPrefix(line, []byte("data: ")):
			if got {
				s.data = append(s.data, '\n')
			} else {
				s.data = s.data[:0]
			}
			s.data, got = append(s.data, line[6:]...), true
		case bytes.HasPrefix(line, []byte("event: ")), bytes.HasPrefix(line, []byte("retry: ")):
		default:
			return nil, nil, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// mercureSub reads one Mercure stream on a goroutine of its own, counts
// its updates and records the latency of stamped ones.
type mercureSub struct {
	s       *stream
	hist    histogram // the goroutine's until done is closed
	count   atomic.Int64
	signal  chan struct{}
	done    chan struct{}
	closing atomic.Bool
	err     error
}

func (p *mercurePeer) subscribeAll(ctx context.Context, topics []string) ([]*mercureSub, error) {
	subs := make([]*mercureSub, len(topics))
	err := parallel(ctx, len(topics), 32, func(ctx context.Context, i int) error {
		s, err := openMercure(ctx, p.addr, topics[i], "", 16<<10)
		if err != nil {
			return err
		}
		sub := &mercureSub{s: s, signal: make(chan struct{}, 1), done: make(chan struct{})}
		go sub.run()
		subs[i] = sub
		return nil
	})
	if err != nil {
		closeMercure(subs)
		return nil, err
	}
	return subs, nil
}

func (sub *mercureSub) run() {
	defer close(sub.done)
	for {
		_, data, err := sub.s.nextMercure()
		if err != nil {
			if !sub.closing.Load() {
				sub.err = err
			}
			return
		}
		if at, ok := stampOf(data); ok {
			sub.hist.record(time.Duration(time.Now().UnixNano() - at))
		}
		sub.count.Add(1)
		select {
		case sub.signal <- struct{}{}:
		default:
		}
	}
}

// waitCount waits until the subscriber has read n updates.
func (sub *mercureSub) waitCount(ctx context.Context, n int64) error {
	return waitRead(ctx, &sub.count, sub.signal, sub.done, func() error { return sub.err }, n, "updates")
}

// closeMercure closes every subscriber and merges their histograms.
func closeMercure(subs []*mercureSub) (h histogram, deliveries int64, err error) {
	for _, sub := range subs {
		if sub == nil || sub.closing.Swap(true) {
			continue
		}
		sub.s.Close()
		<-sub.done
		if sub.err != nil && err == nil {
			err = sub.err
		}
		h.merge(&sub.hist)
		deliveries += sub.count.Load()
	}
	return h, deliveries, err
}

// replayMercure reads topic's history from the start (lastEventID=earliest)
// until it has n updates. When the hub ends the stream first, it
// subscribes again after the last update it read (Last-Event-ID), as an
// EventSource would. It gives up, and says why, when the hub answers a
// subscription that it did not find the id asked for.
func replayMercure(ctx context.Context, addr, topic string, n int) (elapsed time.Duration, got int64, why string, err error) {
	start := time.Now()
	last := "earliest"
	for got < int64(n) {
		s, after, err := openMercureAfter(ctx, addr, topic, last, 64<<10)
		if err != nil {
			return 0, 0, "", err
		}
		if last != "earliest" && after != last {
			s.Close()
			return time.Since(start), got, "a subscription after the last update read was answered with another Last-Event-ID: the hub did not find the one asked for", nil
		}
		stop := s.closeOnDone(ctx)
		var this int64
		var end error
		for got < int64(n) {
			id, _, err := s.nextMercure()
			if err != nil {
				end = err
				break
			}
			last = string(id)
			got++
			this++
		}
		stop()
		s.Close()
		if ctx.Err() != nil {
			return 0, 0, "", ctx.Err()
		}
		if got < int64(n) && this == 0 {
			return time.Since(start), got, "a subscription after the last update read ended with none", nil
		}
		if end != nil && !errors.Is(end, io.ErrUnexpectedEOF) && !errors.Is(end, io.EOF) {
			return 0, 0, "", fmt.Errorf("after %d updates: %w", got, end)
		}
	}
	return time.Since(start), got, "", nil
}

// fileInfo is what the child reports of its store file (op file).
type fileInfo struct {
	File   int64 `json:"file"`   // bytes on disk
	InUse  int64 `json:"in_use"` // bytes of the pages in use
	Events int64 `json:"events"` // bytes of the sandbox's events' JSON
	EventN int   `json:"event_n"`
}
