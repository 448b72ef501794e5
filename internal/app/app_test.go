package app_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
)

func start(t *testing.T) *app.Main {
	t.Helper()
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: "app-token", Logger: slog.New(slog.DiscardHandler)}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestWaitServeFails: a server whose HTTP serving stops after start (its
// listener failed) ends Wait with the reason, which serve then exits with.
func TestWaitServeFails(t *testing.T) {
	m := start(t)
	m.Listener.Close()
	err := m.Wait(context.Background())
	if err == nil || !strings.Contains(err.Error(), "stopped serving on "+m.Listener.Addr().String()) {
		t.Fatalf("Wait: %v, want the HTTP server's failure", err)
	}
	// Asked again, it says the same.
	if again := m.Wait(context.Background()); again == nil || again.Error() != err.Error() {
		t.Fatalf("second Wait: %v, want %v", again, err)
	}
}

// TestWaitShutdown: a server told to stop (its context done) ends Wait
// with nil.
func TestWaitShutdown(t *testing.T) {
	m := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v, want nil", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestMain: this test binary fails as the agent launcher, as one on a
// machine without user namespaces or Landlock does (TestNotConfinable).
func TestMain(m *testing.M) {
	if confine.IsEntry(os.Args) {
		// The launcher's environment is emptied and its PID namespace
		// hides its parent: a test holds it by a file beside this binary.
		for {
			if _, err := os.Stat(holdFile()); err != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "sparkles launcher: this test binary confines nothing")
		os.Exit(125)
	}
	os.Exit(m.Run())
}

// TestNotConfinable: a server that cannot confine the agent processes it
// would start fails Run with ErrNotConfinable, with the launcher's reason
// and how to run them unconfined.
func TestNotConfinable(t *testing.T) {
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: "app-token", Logger: slog.New(slog.DiscardHandler),
		Agents: registry.Registry{"shell": {Command: "/bin/sh"}}}
	err := m.Run(context.Background())
	m.Close()
	if !errors.Is(err, app.ErrNotConfinable) || !strings.Contains(err.Error(), "confines nothing") || !strings.Contains(err.Error(), "--isolation=off") {
		t.Fatalf("Run: %v, want ErrNotConfinable with the launcher's reason, naming --isolation=off", err)
	}
}

// holdFile is where a test holds the launchers this test binary starts
// (TestMain) for as long as the file exists.
func holdFile() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe + ".hold"
}

// TestReadyzWhileProbing: while the confinement probe runs, the server
// answers /healthz, and /readyz answers 503 with the isolation "being
// checked": what confines agents, the cgroups that limit them included,
// is known once the probe's start found them. The probe then fails (this
// binary confines nothing) and the start with it.
func TestReadyzWhileProbing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("confinement is Linux's")
	}
	if _, err := confine.Prepare(confine.Options{DataDir: t.TempDir()}); err != nil {
		t.Skip("this machine cannot confine:", err)
	}
	hold := holdFile()
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hold) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := &app.Main{Addr: addr, DataDir: t.TempDir(), Token: "app-token", Logger: slog.New(slog.DiscardHandler),
		Agents: registry.Registry{"shell": {Command: "/bin/sh"}}}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(context.Background()) }()
	t.Cleanup(func() { m.Close() })

	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// The address is taken before anything else: /healthz waits in the
	// backlog for the server to serve.
	var code int
	var body string
	for {
		code, body, err = get("/healthz")
		if err == nil {
			break
		}
		select {
		case err := <-ran:
			t.Fatalf("Run returned before it served: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if code != http.StatusOK {
		t.Fatalf("/healthz while the probe runs: %d %s", code, body)
	}
	code, body, err = get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"isolation":"being checked"`) || !strings.Contains(body, "checking that agents can be confined") {
		t.Fatalf("/readyz while the probe runs: %d %s %v, want 503 naming the check, isolation being checked", code, body, err)
	}
	select {
	case err := <-ran:
		t.Fatalf("Run returned while its probe was held: %v", err)
	default:
	}
	os.Remove(hold)
	if err := <-ran; !errors.Is(err, app.ErrNotConfinable) || !strings.Contains(err.Error(), "confines nothing") {
		t.Fatalf("Run: %v, want the probe's failure", err)
	}
}

// TestNoAgentBeforeTheProbe: a launcher made without its probe (as Run
// makes it, to serve while the probe runs) runs the probe before the first
// agent it starts, and starts none when the probe fails, however often it
// is asked.
func TestNoAgentBeforeTheProbe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("confinement is Linux's")
	}
	l, err := confine.Prepare(confine.Options{DataDir: t.TempDir(), Network: confine.NetworkNone})
	if err != nil {
		t.Skip("this machine cannot confine:", err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for range 2 {
		cmd := exec.Command("/bin/sh", "-c", "touch "+marker)
		_, err := l.Start(cmd, t.TempDir(), agent.Confinement{})
		if err == nil || !strings.Contains(err.Error(), "confines nothing") {
			t.Fatalf("Start before a failing probe: %v, want the probe's reason", err)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent's command ran: %v", err)
	}
	if err := l.Probe(); err == nil || !strings.Contains(err.Error(), "confines nothing") {
		t.Errorf("Probe: %v, want the verdict Start had", err)
	}
}

// TestTightensDataDir: a data dir and a token file that another local user
// could read (an agent, or an operator, loosened them) are made 0700 and
// 0600 again before the server serves, and the token kept.
func TestTightensDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	token := datadir.Dir(dir).Token()
	if err := os.WriteFile(token, []byte("spk_kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(token, 0o644); err != nil {
		t.Fatal(err)
	}
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: dir, Isolation: "off", Logger: slog.New(slog.DiscardHandler)}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, token: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if got, _ := m.ServedToken(); got != "spk_kept" {
		t.Errorf("token %q, want the file's", got)
	}
}

// TestBusyAddressTouchesNoStore: the address is taken before anything
// else, so a port in use fails the start before the store is created or
// locked.
func TestBusyAddressTouchesNoStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	m := &app.Main{Addr: l.Addr().String(), DataDir: dir, Token: "app-token", Logger: slog.New(slog.DiscardHandler)}
	err = m.Run(context.Background())
	m.Close()
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Run on a busy address: %v, want it named in use", err)
	}
	if _, err := os.Stat(datadir.Dir(dir).Store()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store file after a start that could not listen: %v, want none", err)
	}
}

// TestRequestWaitsForServing: a client that connects while the store is
// still opening (here: waiting for the file's lock, which the test holds)
// is answered once the server serves, not refused.
func TestRequestWaitsForServing(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	dir := t.TempDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(datadir.Dir(dir).Store(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	m := &app.Main{Addr: addr, DataDir: dir, Token: "app-token", Logger: slog.New(slog.DiscardHandler)}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(context.Background()) }()
	t.Cleanup(func() { m.Close() })
	// The store waits up to a second for its lock: the connection must be
	// taken meanwhile.
	var conn net.Conn
	for conn == nil {
		select {
		case err := <-ran:
			t.Fatalf("Run ended while the store's lock was held: %v", err)
		default:
		}
		if conn, err = net.Dial("tcp", addr); err != nil {
			conn = nil
			runtime.Gosched()
		}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the connection made while the store opened: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}
