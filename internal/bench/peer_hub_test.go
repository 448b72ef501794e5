package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envTestHub makes the test binary stand in for the Mercure hub: "serve"
// does what timedHubStart needs of `mercure run`, "exit" fails at once.
const envTestHub = "SPARKLES_BENCH_TEST_HUB"

var (
	hubSite = regexp.MustCompile(`(?m)^http://(\S+) \{$`)
	hubPath = regexp.MustCompile(`(?m)^\s+path "([^"]+)"$`)
)

// runTestHub reads the Caddyfile that `run --config F --adapter caddyfile`
// names, checks what the hub would need of it and of its environment, and
// answers /healthz at its site's address until it is interrupted.
func runTestHub(mode string, args []string) error {
	if mode == "exit" {
		return errors.New("told to fail")
	}
	if len(args) != 5 || args[0] != "run" || args[1] != "--config" || args[3] != "--adapter" || args[4] != "caddyfile" {
		return errors.New("args " + strings.Join(args, " "))
	}
	conf, err := os.ReadFile(args[2])
	if err != nil {
		return err
	}
	site, path := hubSite.FindSubmatch(conf), hubPath.FindSubmatch(conf)
	if site == nil || path == nil || !strings.Contains(string(conf), "respond /healthz 200") {
		return errors.New("no site, bolt path or /healthz in\n" + string(conf))
	}
	if _, err := os.Stat(string(path[1])); err != nil {
		return err
	}
	for _, v := range []string{"XDG_DATA_HOME", "XDG_CONFIG_HOME"} {
		if !strings.HasPrefix(os.Getenv(v), filepath.Dir(args[2])) {
			return errors.New(v + " is outside the hub's directory: " + os.Getenv(v))
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT)
	l, err := net.Listen("tcp", string(site[1]))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(l)
	<-stop
	return srv.Close()
}

func TestHubCaddyfile(t *testing.T) {
	conf, err := hubCaddyfile("127.0.0.1:4000", "/data/mercure.db", "key")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"admin off", "auto_https off", "http://127.0.0.1:4000 {", "transport bolt {", `path "/data/mercure.db"`, `publisher_jwt "key"`, "anonymous", "respond /healthz 200"} {
		if !strings.Contains(conf, want) {
			t.Errorf("no %q in\n%s", want, conf)
		}
	}
	for _, db := range []string{"", `/a "b`, "/a\nb", "/a{b}"} {
		if _, err := hubCaddyfile("127.0.0.1:4000", db, "key"); err == nil {
			t.Errorf("bolt path %q: no error", db)
		}
	}
}

func TestTimedHubStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "mercure.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("Serves", func(t *testing.T) {
		t.Setenv(envTestHub, "serve")
		took, mem, err := timedHubStart(ctx, os.Args[0], db, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if took <= 0 || mem.RSS <= 0 {
			t.Fatalf("took %v, memory %+v", took, mem)
		}
	})
	t.Run("ExitsFirst", func(t *testing.T) {
		t.Setenv(envTestHub, "exit")
		_, _, err := timedHubStart(ctx, os.Args[0], db, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "exited before serving") || !strings.Contains(err.Error(), "told to fail") {
			t.Fatalf("err = %v, want the hub's exit with its standard error", err)
		}
	})
}

func TestTimedExit(t *testing.T) {
	ctx := context.Background()
	took, err := timedExit(ctx, []string{"sh", "-c", "exit 0"})
	if err != nil || took <= 0 {
		t.Fatalf("took %v, err %v", took, err)
	}
	if _, err := timedExit(ctx, []string{"sh", "-c", "echo no such flag; exit 2"}); err == nil || !strings.Contains(err.Error(), "no such flag") {
		t.Fatalf("err = %v, want the exit with its output", err)
	}
}

// A Mercure hub that is not where --mercure-hub says stops the scenario
// before it measures anything, saying how to build one.
func TestPeerHubMissing(t *testing.T) {
	_, err := Run(context.Background(), Config{Scenarios: []string{"peer-store"}, Short: true, Dir: t.TempDir(), ChildCommand: []string{os.Args[0]},
		PeerMercure: os.Args[0], MercureHub: filepath.Join(t.TempDir(), "mercure")})
	if err == nil || !strings.Contains(err.Error(), "go build -o mercure") || !strings.Contains(err.Error(), "--mercure-hub") {
		t.Fatalf("err = %v, want one that says how to build the hub and pass it", err)
	}
}
