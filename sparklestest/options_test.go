package sparklestest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// The test binary is also a process agent: with envAgent set it runs the
// demo agent on its stdin and stdout, if the environment a registered
// agent is given reached it (see TestWithRegisteredAgent).
const (
	envAgent = "SPARKLESTEST_AS_AGENT"
	envMark  = "SPARKLESTEST_MARK" // from the entry's Env
	envPass  = "SPARKLESTEST_PASS" // from the test's environment, by PassEnv
)

func TestMain(m *testing.M) {
	if os.Getenv(envAgent) != "" {
		if os.Getenv(envMark) != "from-env" || os.Getenv(envPass) != "passed" {
			fmt.Fprintf(os.Stderr, "agent environment: %s=%q %s=%q\n", envMark, os.Getenv(envMark), envPass, os.Getenv(envPass))
			os.Exit(3)
		}
		if err := agent.RunDemo(context.Background(), os.Stdin, os.Stdout, os.Environ()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runTurn runs input as a turn on sandbox id and returns its events up to
// turn.completed.
func runTurn(t *testing.T, ctx context.Context, c *client.Client, id, input string) []sandbox.Event {
	t.Helper()
	head, err := c.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stream(ctx, id, client.StreamOptions{Since: client.Since(uint64(head.LastEventID))})
	defer st.Close()
	if _, err := c.StartTurn(ctx, id, input); err != nil {
		t.Fatal(err)
	}
	var evs []sandbox.Event
	for {
		m, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("stream of %s: %v after %s", id, err, kinds(evs))
		}
		if m.Kind != client.KindEvent {
			continue
		}
		evs = append(evs, m.Event)
		if m.Event.Type == sandbox.TypeTurnCompleted {
			return evs
		}
	}
}

// nextOfType reads st up to its next event of type typ.
func nextOfType(t *testing.T, ctx context.Context, st *client.Stream, typ sandbox.Type) sandbox.Event {
	t.Helper()
	for {
		m, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v, before an event of type %s", err, typ)
		}
		if m.Kind == client.KindEvent && m.Event.Type == typ {
			return m.Event
		}
	}
}

func turnStatus(evs []sandbox.Event) string {
	if c := find[sandbox.TurnCompleted](evs); c != nil {
		return c.Status
	}
	return ""
}

// TestWithToken: the server takes the token the test gives it, and no
// other.
func TestWithToken(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t, sparklestest.WithToken("a-token-of-this-test"))
	if srv.Token != "a-token-of-this-test" {
		t.Fatalf("Token = %q", srv.Token)
	}
	if _, err := srv.Client.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	_, err := client.New(srv.URL, sparklestest.DefaultToken).ListSandboxes(ctx, client.ListOptions{})
	if !client.IsType(err, sandbox.EUnauthorized) {
		t.Fatalf("with DefaultToken: %v, want unauthorized", err)
	}
}

// TestWithDataDirAndAddr: a second server on the store and the address of
// a stopped one serves what the first one wrote, at the same URL.
func TestWithDataDirAndAddr(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	first := sparklestest.Start(t, sparklestest.WithDataDir(dir), sparklestest.WithoutRetention())
	if first.DataDir != dir {
		t.Fatalf("DataDir = %q, want %q", first.DataDir, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "sparkles.db")); err != nil {
		t.Fatalf("the store is not in the data dir: %v", err)
	}
	if first.URL != "http://"+first.Addr() {
		t.Fatalf("URL %q, Addr %q", first.URL, first.Addr())
	}
	sb, err := first.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"from": "first"}})
	if err != nil {
		t.Fatal(err)
	}
	addr := first.Addr()
	first.Stop()

	second := sparklestest.Start(t, sparklestest.WithDataDir(dir), sparklestest.WithAddr(addr), sparklestest.WithoutRetention())
	if second.Addr() != addr || second.URL != first.URL {
		t.Fatalf("second server at %s (%s), want %s", second.Addr(), second.URL, addr)
	}
	got, err := first.Client.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatalf("the first server's client against the second: %v", err)
	}
	if got.Metadata["from"] != "first" {
		t.Fatalf("sandbox = %+v", got)
	}
}

// TestAgentsRegistered: process agents registered by command or as an
// agents file entry are listed beside the demo, each with whether its
// command resolves.
func TestAgentsRegistered(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t,
		sparklestest.WithAgent("shell", "/bin/sh", "-c", "exit 0"),
		sparklestest.WithAgent("missing", filepath.Join(t.TempDir(), "no-such-agent")),
		sparklestest.WithRegisteredAgent("entry", sparklestest.Agent{Command: "/bin/sh", Args: []string{"-c", "exit 0"}}),
	)
	agents, err := srv.Client.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Agent{{Name: "demo", Available: true}, {Name: "entry", Available: true}, {Name: "missing"}, {Name: "shell", Available: true}}
	if !slices.Equal(agents, want) {
		t.Fatalf("agents = %+v, want %+v", agents, want)
	}
}

// TestWithRegisteredAgent: a registered process agent runs, confined (the
// default isolation: the test binary is its own launcher), with its
// entry's Env and the test's variables it names in PassEnv; it fails to
// boot without them (see TestMain).
func TestWithRegisteredAgent(t *testing.T) {
	ctx := testContext(t)
	t.Setenv(envPass, "passed")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := sparklestest.Start(t,
		sparklestest.WithRegisteredAgent("self", sparklestest.Agent{
			Command: exe,
			Env:     map[string]string{envAgent: "1", envMark: "from-env"},
			PassEnv: []string{envPass},
		}),
		sparklestest.WithRegisteredAgent("self-without-pass", sparklestest.Agent{
			Command: exe,
			Env:     map[string]string{envAgent: "1", envMark: "from-env"},
		}),
	)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Agent: "self"})
	if err != nil {
		t.Fatal(err)
	}
	if evs := runTurn(t, ctx, srv.Client, sb.ID, "hello"); turnStatus(evs) != sandbox.TurnSucceeded {
		t.Fatalf("turn of the process agent: %s", kinds(evs))
	}

	bad, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Agent: "self-without-pass"})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Client.Stream(ctx, bad.ID, client.StreamOptions{Since: client.Since(0)})
	defer st.Close()
	nextOfType(t, ctx, st, sandbox.TypeSandboxError)
}

// TestWithBuiltinAgentAndDefault: an in-process agent runs with the
// environment it would have had as a process, and is the agent of the
// sandboxes created without one when it is the default.
func TestWithBuiltinAgentAndDefault(t *testing.T) {
	ctx := testContext(t)
	envs := make(chan []string, 4)
	srv := sparklestest.Start(t,
		sparklestest.WithBuiltinAgent("mine", func(ctx context.Context, in io.Reader, out io.Writer, env []string) error {
			envs <- env
			return agent.RunDemo(ctx, in, out, env)
		}),
		sparklestest.WithDefaultAgent("mine"),
	)
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent != "mine" {
		t.Fatalf("agent of a sandbox created without one: %q, want mine", sb.Agent)
	}
	if evs := runTurn(t, ctx, srv.Client, sb.ID, "hello"); turnStatus(evs) != sandbox.TurnSucceeded {
		t.Fatalf("turn: %s", kinds(evs))
	}
	select {
	case env := <-envs:
		if !slices.Contains(env, "GREETING=hi") {
			t.Fatalf("the agent's environment lacks the sandbox's GREETING: %q", env)
		}
	case <-ctx.Done():
		t.Fatal("the in-process agent never ran")
	}
}

// TestWithKeepalive: an idle stream gets pings at the interval the test
// sets: three of them at 20 ms apart arrive long before the stream's 5 s
// deadline, which the default interval (15 s) would reach with none.
func TestWithKeepalive(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t, sparklestest.WithKeepalive(20*time.Millisecond))
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	streamCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(streamCtx, http.MethodGet, srv.URL+"/v1/sandboxes/"+sb.ID+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	pings := 0
	for lines.Scan() {
		if lines.Text() == ": ping" {
			if pings++; pings == 3 {
				return
			}
		}
	}
	t.Fatalf("the stream ended after %d pings of 3: %v", pings, lines.Err())
}

// TestWithApprovalTimeout: an approval nobody decides resolves at the
// timeout the test sets.
func TestWithApprovalTimeout(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t, sparklestest.WithApprovalTimeout(100*time.Millisecond))
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	evs := runTurn(t, ctx, srv.Client, sb.ID, "please write notes.txt")
	res := find[sandbox.ApprovalResolved](evs)
	if res == nil || res.Reason != sandbox.ReasonTimeout {
		t.Fatalf("approval.resolved = %+v, want one of reason timeout; events %s", res, kinds(evs))
	}
}

// TestWithLoggerAndIsolation: the server logs to the test's logger, and
// runs agents as WithIsolation says.
func TestWithLoggerAndIsolation(t *testing.T) {
	rec := &records{}
	srv := sparklestest.Start(t, sparklestest.WithLogger(slog.New(rec)), sparklestest.WithIsolation("off"))
	serving, ok := rec.find("sparkles is serving")
	if !ok {
		t.Fatalf("no start-up line among %q", rec.messages())
	}
	if serving["api"] != srv.URL+"/v1" || serving["isolation"] != "off" {
		t.Fatalf("start-up line %v, want api %s/v1 and isolation off", serving, srv.URL)
	}
}

// TestWithIsolationRefused: a mode serve does not know fails Start, with
// serve's message.
func TestWithIsolationRefused(t *testing.T) {
	ft := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sparklestest.Start(ft, sparklestest.WithIsolation("sometimes"))
	}()
	<-done
	if !strings.Contains(ft.fatal, `--isolation "sometimes"`) {
		t.Fatalf("Start with isolation sometimes: %q, want the flag's error", ft.fatal)
	}
}

// fatalTB records a Fatalf and ends the goroutine that called it, as a
// test's own does.
type fatalTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// records is a slog handler that keeps every record's message and
// attributes.
type records struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return nil
}

func (r *records) find(msg string) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.recs {
		if m["msg"] == msg {
			return m, true
		}
	}
	return nil, false
}

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.recs {
		out = append(out, m["msg"])
	}
	return out
}
