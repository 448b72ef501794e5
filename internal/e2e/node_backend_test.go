package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNodeBackendReader runs web/testdata/backend-reader.mjs under Node
// against `sparkles serve`: a backend that reads a sandbox's stream with
// sparkles-events.js and the server token, is cut off mid-turn and resumes
// with Last-Event-ID, then checks what it delivered against the JSON pages.
// Through a proxy that gets the stream wrong in one way or another, the
// same script must fail: it is a test of the stream, not a demo.
func TestNodeBackendReader(t *testing.T) {
	node := nodeForTests(t)
	const token = "node-backend-token"
	p := startServe(t, cliEnv(t), t.TempDir(), token)
	t.Cleanup(func() {
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("serve exited with %d:\n%s", code, p.logTail())
		}
	})
	p.waitServing()

	t.Run("OK", func(t *testing.T) {
		out, err := runBackendReader(t, node, p.url, token)
		if err != nil || !strings.HasPrefix(out, "ok:") {
			t.Fatalf("backend-reader.mjs: %v\n%s", err, out)
		}
		t.Log(strings.TrimSpace(out))
	})

	for _, tc := range []struct {
		name string
		f    streamFault
		want string // in the script's error
	}{
		// One durable frame never reaches the reader.
		{"ErrDroppedFrame", streamFault{drop: "id: 2\n"}, "reader A delivered ids"},
		// The reconnection's cursor never reaches the server: it starts
		// with the live tail and the rest of the first turn is lost.
		{"ErrCursorIgnored", streamFault{stripCursor: true}, "reader A delivered ids"},
		// A frame's data is not what the log holds.
		{"ErrAlteredData", streamFault{replace: [2]string{`"kind":"read"`, `"kind":"search"`}}, "differs from the log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := faultyProxy(t, p.url, tc.f)
			out, err := runBackendReader(t, node, proxy, token)
			if err == nil {
				t.Fatalf("backend-reader.mjs passed a wrong stream:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("backend-reader.mjs failed for another reason than %q: %v\n%s", tc.want, err, out)
			}
		})
	}
}

// nodeForTests finds node 18 or later (fetch, ReadableStream); without it
// the test is skipped, except in CI.
func nodeForTests(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		out, verr := exec.Command(node, "-p", "process.versions.node").Output()
		major, _ := strconv.Atoi(strings.Split(strings.TrimSpace(string(out)), ".")[0])
		if verr == nil && major >= 18 {
			return node
		}
		err = verr
		if err == nil {
			err = errNodeTooOld
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("node 18 or later is needed for the Node backend test: %v", err)
	}
	t.Skipf("node 18 or later is not installed (%v); skipping the Node backend test", err)
	return ""
}

var errNodeTooOld = errors.New("node is older than 18")

func runBackendReader(t *testing.T, node, base, token string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, repoFile("web/testdata/backend-reader.mjs"))
	cmd.Env = append(os.Environ(), "SPARKLES_URL="+base, "SPARKLES_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// streamFault is what a faulty proxy gets wrong in event streams.
type streamFault struct {
	drop        string    // drop the frames that contain this
	stripCursor bool      // remove Last-Event-ID from stream requests
	replace     [2]string // replace the first with the second in every frame
}

// faultyProxy serves a reverse proxy of target on loopback that applies f
// to the event streams passing through it.
func faultyProxy(t *testing.T, target string, f streamFault) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		if f.stripCursor && strings.HasSuffix(r.URL.Path, "/events/stream") {
			r.Header.Del("Last-Event-ID")
		}
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = f.filter(resp.Body)
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// filter passes the stream on frame by frame, changed by f.
func (f streamFault) filter(body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer body.Close()
		br := bufio.NewReader(body)
		var frame []byte
		for {
			line, err := br.ReadBytes('\n')
			frame = append(frame, line...)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if len(line) > 1 {
				continue
			}
			switch {
			case f.drop != "" && bytes.Contains(frame, []byte(f.drop)):
			case f.replace[0] != "":
				frame = bytes.ReplaceAll(frame, []byte(f.replace[0]), []byte(f.replace[1]))
				fallthrough
			default:
				if _, err := pw.Write(frame); err != nil {
					return // the client left
				}
			}
			frame = nil
		}
	}()
	return pr
}
