package app_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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
