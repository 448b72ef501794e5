package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// serveFails runs serve and expects it to exit non-zero at once with one
// line that contains want, and no Go panic or fault; it returns the output.
func serveFails(t *testing.T, want string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"serve"}, args...)...)
	cmd.Env = cliEnv(t)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve hung instead of failing; output:\n%s", out)
	}
	if err == nil {
		t.Fatalf("serve exited 0; output:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "sparkles: ") || !strings.Contains(last, want) {
		t.Fatalf("last line %q does not say %q; output:\n%s", last, want, out)
	}
	if strings.Contains(string(out), "goroutine ") {
		t.Fatalf("serve failed with a Go trace:\n%s", out)
	}
	return last
}

func TestServeStartupErrors(t *testing.T) {
	t.Run("ErrPortTaken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		serveFails(t, "is already in use; stop the other server or pass --addr",
			"--addr", l.Addr().String(), "--data-dir", t.TempDir())
	})
	t.Run("ErrDataDirUnwritable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		os.WriteFile(file, nil, 0o600)
		serveFails(t, "pass a writable --data-dir", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(file, "data"))
	})
	t.Run("ErrDatabaseLocked", func(t *testing.T) {
		dir := t.TempDir()
		startServe(t, cliEnv(t), dir, "").waitServing()
		serveFails(t, "in use by another sparkles process", "--addr", "127.0.0.1:0", "--data-dir", dir)
	})
	t.Run("ErrBadAgentFlag", func(t *testing.T) {
		serveFails(t, "want NAME=COMMAND", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--agent", "nonsense")
	})
}

// TestServeToken checks the generated token: written once with mode 0600,
// reused by the next start, and the only key that opens the API.
func TestServeToken(t *testing.T) {
	dir := t.TempDir()
	srv1 := startServe(t, cliEnv(t), dir, "")
	srv1.waitServing()
	path := filepath.Join(dir, "token")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Fatalf("token file mode = %v, want %v", got, want)
	}
	first, _ := os.ReadFile(path)
	status := func(base, token string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	token := strings.TrimSpace(string(first))
	if got, want := status(srv1.url, token), http.StatusOK; got != want {
		t.Fatalf("with the file's token: %d, want %d", got, want)
	}
	if got, want := status(srv1.url, token+"x"), http.StatusUnauthorized; got != want {
		t.Fatalf("with a wrong token: %d, want %d", got, want)
	}
	srv1.signal(syscall.SIGINT)

	srv2 := startServe(t, cliEnv(t), dir, "")
	srv2.waitServing()
	second, _ := os.ReadFile(path)
	if string(first) != string(second) {
		t.Fatal("the token changed across restarts")
	}
	if got, want := status(srv2.url, token), http.StatusOK; got != want {
		t.Fatalf("after restart: %d, want %d", got, want)
	}
}

// writeDatabase writes a database with a few sandboxes and some thousand
// events into dataDir, as a server would have left it.
func writeDatabase(t *testing.T, dataDir string) string {
	t.Helper()
	path := filepath.Join(dataDir, "sparkles.db")
	st := bolttest.MustOpenAt(t, path, boltstore.Options{})
	ctx := context.Background()
	for i := range 3 {
		sb := sandbox.Sandbox{ID: fmt.Sprintf("c_%026d", i), Object: "sandbox", Status: sandbox.StatusStopped, Agent: "demo"}
		if err := st.Create(ctx, sb, nil); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			evs := make([]*sandbox.Event, 100)
			for j := range evs {
				evs[j] = &sandbox.Event{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{
					MessageID: "msg_1", PartID: fmt.Sprintf("part_%d", j), Kind: sandbox.PartText, Text: strings.Repeat("x", 200)}}
			}
			if err := st.Append(ctx, sb.ID, evs, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeDamagedDatabase: serve on a database file cut short, full of
// garbage, or overwritten in the middle exits with one line that says what
// is wrong and what to do, never with a Go panic or fault; db check says
// the same.
func TestServeDamagedDatabase(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(b []byte) []byte
		problem string
	}{
		{"Truncated", func(b []byte) []byte { return b[:len(b)/2] }, "cut short"},
		{"Garbage", func(b []byte) []byte {
			r := rand.New(rand.NewPCG(1, 2))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			return b
		}, "not a sparkles database"},
		{"Overwritten", func(b []byte) []byte {
			r := rand.New(rand.NewPCG(3, 4))
			for i := 2 * 4096; i < len(b); i++ {
				b[i] = byte(r.Uint32())
			}
			return b
		}, "overwritten"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeDatabase(t, dir)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			out := serveFails(t, tc.problem, "--addr", "127.0.0.1:0", "--data-dir", dir)
			for _, want := range []string{"is damaged", "Restore it from a copy", "sparkles db check"} {
				if !strings.Contains(out, want) {
					t.Fatalf("the error does not say %q:\n%s", want, out)
				}
			}
			res := run(t, cliEnv(t), "db", "check", "--data-dir", dir)
			if res.code != 1 || !strings.Contains(res.stderr, tc.problem) || strings.Contains(res.stderr, "goroutine ") {
				t.Fatalf("db check: exit %d, stderr:\n%s", res.code, res.stderr)
			}
		})
	}
	t.Run("OK", func(t *testing.T) {
		dir := t.TempDir()
		writeDatabase(t, dir)
		res := run(t, cliEnv(t), "db", "check", "--data-dir", dir)
		if res.code != 0 || !strings.Contains(res.stdout, "no problem found") {
			t.Fatalf("db check of a good file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	})
}

// TestServeLostDatabase: a database missing or empty beside sandbox
// directories is a database lost, not a new data dir: serve refuses to
// start on a new one unless told to with --start-empty or its variable.
func TestServeLostDatabase(t *testing.T) {
	withSandboxDir := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "sandboxes", "c_01JZ0000000000000000000000", "work"), 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("ErrMissing", func(t *testing.T) {
		serveFails(t, "pass --start-empty (SPARKLES_START_EMPTY=true)", "--addr", "127.0.0.1:0", "--data-dir", withSandboxDir(t))
	})
	t.Run("ErrEmpty", func(t *testing.T) {
		dir := withSandboxDir(t)
		if err := os.WriteFile(filepath.Join(dir, "sparkles.db"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out := serveFails(t, "--start-empty", "--addr", "127.0.0.1:0", "--data-dir", dir)
		if !strings.Contains(out, "is empty (0 bytes)") {
			t.Fatalf("the error does not say the file is empty:\n%s", out)
		}
	})
	t.Run("StartEmptyFlag", func(t *testing.T) {
		srv := startServe(t, cliEnv(t), withSandboxDir(t), "", "--start-empty")
		srv.waitServing()
		srv.signal(syscall.SIGTERM)
	})
	t.Run("StartEmptyEnv", func(t *testing.T) {
		srv := startServe(t, cliEnv(t, "SPARKLES_START_EMPTY=true"), withSandboxDir(t), "")
		srv.waitServing()
		srv.signal(syscall.SIGTERM)
	})
	t.Run("NewDataDir", func(t *testing.T) {
		srv := startServe(t, cliEnv(t), t.TempDir(), "")
		srv.waitServing()
		srv.signal(syscall.SIGTERM)
	})
}

// TestServeDataDirDeleted: the data dir deleted under a running server is
// noticed within seconds: /readyz answers 503 with the reason, writes 503
// unavailable, reads keep working, and the log has one ERROR line for it.
func TestServeDataDirDeleted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	log := &syncbuf.Buffer{}
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: dir, Token: "deleted-token", Logger: slog.New(slog.NewTextHandler(log, nil))}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	base := "http://" + m.Listener.Addr().String()
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("Authorization", "Bearer deleted-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := call(http.MethodPost, "/v1/sandboxes")
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatal(err)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body = call(http.MethodGet, "/readyz")
		if status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s 30s after the data dir was deleted", status, body)
		}
		time.Sleep(50 * time.Millisecond) // a poll of /readyz: the store checks on a tick of its own
	}
	if !strings.Contains(body, "deleted or replaced") {
		t.Fatalf("/readyz reason: %s", body)
	}
	for _, w := range []struct{ method, path string }{
		{http.MethodDelete, "/v1/sandboxes/" + sb.ID},
		{http.MethodPost, "/v1/sandboxes"},
	} {
		status, body := call(w.method, w.path)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, `"type":"unavailable"`) || strings.Contains(body, dir) {
			t.Fatalf("%s %s after the delete: %d %s, want 503 unavailable without the path", w.method, w.path, status, body)
		}
	}
	for _, path := range []string{"/v1/sandboxes/" + sb.ID, "/v1/sandboxes/" + sb.ID + "/events", "/v1/sandboxes"} {
		if status, body := call(http.MethodGet, path); status != http.StatusOK {
			t.Fatalf("GET %s after the delete: %d %s, want 200", path, status, body)
		}
	}
	if got := strings.Count(log.String(), "level=ERROR msg=\"event store"); got != 1 {
		t.Fatalf("%d ERROR lines of the store, want 1:\n%s", got, log)
	}
}
