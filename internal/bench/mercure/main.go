// Command mercure-peer runs a Mercure hub (github.com/dunglas/mercure) with
// its bolt transport on a loopback address, as the peer that `sparkles bench
// --scenario peer` measures Sparkles against. It prints the address it
// listens on as its first line on stdout, answers GET /healthz with 200
// besides the hub's own routes, then serves until it is
// interrupted or, with -stdin, until its standard input closes. With -stdin
// it also answers the line "gc" with "ok" once it has collected garbage and
// returned the freed memory to the OS, so that a reading of its RSS holds
// what is live, as the bench's own child server does before it is measured.
//
// It is a module of its own so that the main module's build and tests do not
// depend on Mercure. Build it with internal/bench/mercure/run, or:
//
//	cd internal/bench/mercure && go build -o mercure-peer .
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/dunglas/mercure"
)

// The keys the bench signs its tokens with unless told otherwise. They
// guard a hub on a loopback address that lives for one benchmark.
const (
	benchPublisherKey  = "sparkles-bench-publisher-key-0123456789abcdef"
	benchSubscriberKey = "sparkles-bench-subscriber-key-0123456789abcdef"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mercure-peer:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on; port 0 picks a free one")
	db := flag.String("db", "", "path of the bolt file of the transport (required)")
	size := flag.Uint64("size", 0, "updates the bolt transport keeps; 0 keeps them all")
	cleanup := flag.Float64("cleanup-frequency", mercure.BoltDefaultCleanupFrequency, "chance of a cleanup at each update, when -size is set")
	pubKey := flag.String("publisher-key", benchPublisherKey, "HS256 key of the publishers' JWTs")
	subKey := flag.String("subscriber-key", benchSubscriberKey, "HS256 key of the subscribers' JWTs")
	anonymous := flag.Bool("anonymous", true, "allow subscribers without a JWT")
	dispatch := flag.Duration("dispatch-timeout", mercure.DefaultDispatchTimeout, "how long an update may wait for a slow subscriber before it is disconnected")
	heartbeat := flag.Duration("heartbeat", mercure.DefaultHeartbeat, "interval of the SSE heartbeat comment; 0 disables it")
	watchStdin := flag.Bool("stdin", false, "exit when standard input closes (for a parent process that holds a pipe); answer \"gc\" with \"ok\" after a GC")
	flag.Parse()
	if *db == "" {
		return errors.New("-db is required")
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %s: only a loopback IP address is served", *addr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *watchStdin {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer cancel()
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				if sc.Text() == "gc" {
					for range 4 {
						runtime.GC()
					}
					debug.FreeOSMemory()
					fmt.Println("ok")
				}
			}
		}()
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	transport, err := mercure.NewBoltTransport(mercure.NewSubscriberList(mercure.DefaultSubscriberListCacheSize),
		logger, *db, "", *size, *cleanup)
	if err != nil {
		return err
	}
	opts := []mercure.Option{
		mercure.WithTransport(transport),
		mercure.WithLogger(logger),
		mercure.WithPublisherJWT([]byte(*pubKey), "HS256"),
		mercure.WithSubscriberJWT([]byte(*subKey), "HS256"),
		mercure.WithDispatchTimeout(*dispatch),
		mercure.WithHeartbeat(*heartbeat),
		// Streams stay open for the whole benchmark.
		mercure.WithWriteTimeout(0),
	}
	if *anonymous {
		opts = append(opts, mercure.WithAnonymous())
	}
	hub, err := mercure.NewHub(ctx, opts...)
	if err != nil {
		transport.Close(ctx)
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		hub.Stop(ctx)
		return err
	}
	fmt.Println(ln.Addr().String())
	// /healthz answers once the hub and its transport are open: the
	// bench times a start to its first answer, as it does Sparkles'.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", hub)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	select {
	case err = <-done:
	case <-ctx.Done():
		// Streams never end by themselves: close them rather than wait.
		err = srv.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, hub.Stop(context.Background()))
}
