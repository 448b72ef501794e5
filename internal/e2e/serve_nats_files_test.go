package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestServeNATSFiles runs two `sparkles serve` processes on one NATS
// server. A sandbox created on A has its workspace on A's disk; its
// files, archive and turn diffs, asked of B, are answered by A through B,
// bytes and headers as A gives them. Once A is gone, B answers 503 until
// A's lease lapses, then takes the sandbox over with an empty workspace.
func TestServeNATSFiles(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	const token = "nats-files-token"
	dirA, dirB := t.TempDir(), t.TempDir()
	start := func(dir, node string) *serveProc {
		p := startServe(t, cliEnv(t), dir, token, "--store", natsURL, "--node-id", node, "--lease-ttl", "3s")
		p.waitServing()
		return p
	}
	a, b := start(dirA, "node-a"), start(dirB, "node-b")

	var sb sandbox.Sandbox
	a.mustCall("POST", "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	files := "/v1/sandboxes/" + sb.ID + "/files/"

	t.Run("PutThroughB", func(t *testing.T) {
		resp, body := nodeCall(t, b, "PUT", files+"dir%20x/hello.txt", nil, "hello from B\n")
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("ETag") == "" {
			t.Fatalf("PUT through B: %d %s %v\nA:\n%s\nB:\n%s", resp.StatusCode, body, resp.Header, a.logTail(), b.logTail())
		}
		onA := filepath.Join(dirA, "sandboxes", sb.ID, "work", "dir x", "hello.txt")
		if got, err := os.ReadFile(onA); err != nil || string(got) != "hello from B\n" {
			t.Fatalf("the file on A's disk: %q, %v", got, err)
		}
		if _, err := os.Stat(filepath.Join(dirB, "sandboxes", sb.ID)); !os.IsNotExist(err) {
			t.Fatalf("B has a directory of the sandbox A runs: %v", err)
		}
		resp, body = nodeCall(t, b, "PUT", files+"dir%20x/hello.txt", map[string]string{"If-Match": `"stale"`}, "lost update")
		if resp.StatusCode != http.StatusPreconditionFailed || !strings.Contains(body, sandbox.EPreconditionFailed) {
			t.Fatalf("PUT with a stale If-Match through B: %d %s, want 412", resp.StatusCode, body)
		}
	})
	t.Run("GetThroughBoth", func(t *testing.T) {
		for _, p := range []*serveProc{b, a} {
			resp, body := nodeCall(t, p, "GET", files+"dir%20x/hello.txt", nil, "")
			if resp.StatusCode != http.StatusOK || body != "hello from B\n" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("GET: %d %q %v", resp.StatusCode, body, resp.Header)
			}
		}
		resp, body := nodeCall(t, b, "GET", files+"dir%20x/hello.txt", map[string]string{"Range": "bytes=6-9"}, "")
		if resp.StatusCode != http.StatusPartialContent || body != "from" {
			t.Fatalf("GET with a Range through B: %d %q", resp.StatusCode, body)
		}
		resp, body = nodeCall(t, b, "GET", files+"dir%20x", nil, "")
		var list struct {
			Data []struct{ Path, Type string } `json:"data"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list.Data) != 1 || list.Data[0].Path != "dir x/hello.txt" {
			t.Fatalf("listing through B: %d %s", resp.StatusCode, body)
		}
		resp, body = nodeCall(t, b, "GET", "/v1/sandboxes/c_nosuchsandbox0000000000000/files/a.txt", nil, "")
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET of an unknown sandbox's file through B: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("ArchiveThroughB", func(t *testing.T) {
		var tarball bytes.Buffer
		tw := tar.NewWriter(&tarball)
		up := "uploaded through B\n"
		if err := tw.WriteHeader(&tar.Header{Name: "up/x.txt", Mode: 0o644, Size: int64(len(up)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, up)
		tw.Close()
		resp, body := nodeCall(t, b, "PUT", "/v1/sandboxes/"+sb.ID+"/archive", nil, tarball.String())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT archive through B: %d %s", resp.StatusCode, body)
		}
		resp, body = nodeCall(t, b, "GET", "/v1/sandboxes/"+sb.ID+"/archive", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET archive through B: %d %s", resp.StatusCode, body)
		}
		got := nodeUntar(t, body)
		if got["dir x/hello.txt"] != "hello from B\n" || got["up/x.txt"] != up {
			t.Fatalf("the archive through B holds %q", got)
		}
	})
	t.Run("DiffThroughB", func(t *testing.T) {
		turn := nodeApprovedTurn(t, b, sb.ID, "write notes.txt")
		resp, body := nodeCall(t, b, "GET", "/v1/sandboxes/"+sb.ID+"/turns/"+turn+"/diff", nil, "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "+++ b/notes.txt") || !strings.Contains(body, "+Prompt: write notes.txt") {
			t.Fatalf("diff through B: %d %s\nA:\n%s", resp.StatusCode, body, a.logTail())
		}
		if _, err := os.Stat(filepath.Join(dirA, "sandboxes", sb.ID, "work", "notes.txt")); err != nil {
			t.Fatalf("the turn run through B did not write on A: %v", err)
		}
		// A revert asked of B is a call forwarded to A, which restores its
		// workspace.
		resp, body = nodeCall(t, b, "POST", "/v1/sandboxes/"+sb.ID+"/turns/"+turn+"/revert", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("revert through B: %d %s\nA:\n%s", resp.StatusCode, body, a.logTail())
		}
		if _, err := os.Stat(filepath.Join(dirA, "sandboxes", sb.ID, "work", "notes.txt")); !os.IsNotExist(err) {
			t.Fatalf("notes.txt on A after a revert through B: %v", err)
		}
	})
	t.Run("DeleteThroughB", func(t *testing.T) {
		if resp, body := nodeCall(t, b, "DELETE", files+"up?recursive=true", nil, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE through B: %d %s", resp.StatusCode, body)
		}
		if resp, body := nodeCall(t, a, "GET", files+"up/x.txt", nil, ""); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET on A after a DELETE through B: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("HolderGone", func(t *testing.T) {
		a.kill()
		// A's lease holds for the TTL after its last renewal: B sends to
		// A, which does not answer.
		resp, body := nodeCall(t, b, "GET", files+"dir%20x/hello.txt", nil, "")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, sandbox.EUnavailable) {
			t.Fatalf("GET through B with A gone: %d %s, want 503", resp.StatusCode, body)
		}
		// Then B takes the sandbox over; the workspace stayed on A's disk.
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, body = nodeCall(t, b, "GET", files+"dir%20x/hello.txt", nil, "")
			if resp.StatusCode == http.StatusNotFound {
				break
			}
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("GET through B after A's lease: %d %s, want 404 once B took the sandbox over\nB:\n%s", resp.StatusCode, body, b.logTail())
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// nodeCall sends a request with a raw body and returns the answer and its
// body read whole.
func nodeCall(t *testing.T, p *serveProc, method, path string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, string(b)
}

// nodeUntar reads a tar.gz into its regular files' contents by name.
func nodeUntar(t *testing.T, gz string) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
}

// nodeApprovedTurn runs a turn through p, approves each write it asks for,
// and returns the turn's id once it succeeded.
func nodeApprovedTurn(t *testing.T, p *serveProc, id, input string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var since uint64
	resp, err := openStream(ctx, p.streams, p.url, p.token, id, &since)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var turn sandbox.Turn
	p.mustCall("POST", "/v1/sandboxes/"+id+"/turns", map[string]string{"input": input}, http.StatusAccepted, &turn)
	frames := newSSEFrames(resp.Body)
	for {
		f, err := frames.next()
		if err != nil {
			t.Fatalf("stream: %v\n%s", err, p.logTail())
		}
		if f.id == "" {
			continue
		}
		var ev sandbox.Event
		if err := json.Unmarshal(f.data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.TurnID != turn.ID {
			continue
		}
		switch d := ev.Data.(type) {
		case *sandbox.ApprovalRequested:
			p.mustCall("POST", "/v1/sandboxes/"+id+"/approvals/"+d.ApprovalID, map[string]string{"decision": "approve"}, http.StatusOK, nil)
		case *sandbox.TurnCompleted:
			if d.Status != sandbox.TurnSucceeded {
				t.Fatalf("turn %s: %+v", turn.ID, d)
			}
			return turn.ID
		}
	}
}
