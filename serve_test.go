package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveFails runs serve and expects it to exit non-zero at once with one
// line that contains want.
func serveFails(t *testing.T, want string, args ...string) {
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
