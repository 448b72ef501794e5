package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The Mercure hub as its project ships it (Caddy with the Mercure module,
// built by internal/bench/mercurehub), whose cold start peerStart times
// beside mercure-peer's when Config.MercureHub is set. mercure-peer runs
// the hub's library alone, behind a plain net/http server; the hub as
// shipped is what a user of Mercure starts.

// hubCaddyfile is the hub's configuration for a start on addr over the
// bolt file db: the site of the hub's own Caddyfile (its mercure block
// with the bolt transport, a publisher key, anonymous subscribers, and
// its `respond /healthz 200`), less what would only add to the hub's
// start here: the admin endpoint, the saved copy of the configuration and
// automatic HTTPS are off, and the site logs nothing.
func hubCaddyfile(addr, db, key string) (string, error) {
	for _, v := range []string{addr, db, key} {
		if v == "" || strings.ContainsAny(v, "\"\\\n{}") {
			return "", fmt.Errorf("%q cannot be written into a Caddyfile", v)
		}
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
}

http://%s {
	mercure {
		transport bolt {
			path "%s"
		}
		publisher_jwt "%s"
		anonymous
	}
	respond /healthz 200
}
`, addr, db, key), nil
}

// timedHubStart starts the hub at path on db and times it from the exec
// to its first /healthz answer; dir holds its configuration and the data
// and configuration folders Caddy writes. It stops the hub before it
// returns.
func timedHubStart(ctx context.Context, path, db, dir string) (time.Duration, procMem, error) {
	port, err := freePort()
	if err != nil {
		return 0, procMem{}, err
	}
	addr := "127.0.0.1:" + port
	conf, err := hubCaddyfile(addr, db, newToken())
	if err != nil {
		return 0, procMem{}, err
	}
	confPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return 0, procMem{}, err
	}
	cmd := exec.Command(path, "run", "--config", confPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, procMem{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, procMem{}, err
	}
	tail := &tailBuffer{}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tail.Write(append(sc.Bytes(), '\n'))
		}
		_ = cmd.Wait()
	}()
	defer stopChild(cmd.Process, syscall.SIGINT, exited)
	if err := untilHealthy(ctx, addr, exited); err != nil {
		if errors.Is(err, errExited) {
			return 0, procMem{}, fmt.Errorf("the Mercure hub exited before serving: %s", tail)
		}
		return 0, procMem{}, err
	}
	took := time.Since(start)
	mem, err := readProcMem(cmd.Process.Pid)
	return took, mem, err
}

// timedExit runs argv and times it from the exec to its exit: a binary's
// floor, what it takes to be read, initialized and to end, with none of
// its server's work.
func timedExit(ctx context.Context, argv []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return time.Since(start), nil
}
