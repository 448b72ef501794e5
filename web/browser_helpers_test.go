package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/server"
	"github.com/sparkles-dev/sparkles/web"
)

const testToken = "web-test-token"

// sparkles is a real server for one browser test: a bbolt file in a
// temporary directory, the demo agent, the API and the page, on a loopback
// port that survives a restart.
type sparkles struct {
	t      testing.TB
	dir    string
	addr   string
	URL    string
	Client *client.Client

	cfg      coordinator.Config // what a test changes of the coordinator's configuration
	webhooks server.Webhooks    // serves /v1/webhooks when set

	mu  sync.Mutex
	run *running
}

type running struct {
	store *boltstore.Store
	coord *coordinator.Coordinator
	srv   *server.Server
	done  chan error
}

// serverOption changes a test's server.
type serverOption func(*sparkles)

// withApprovalTimeout makes approvals expire after d instead of minutes.
func withApprovalTimeout(d time.Duration) serverOption {
	return func(s *sparkles) { s.cfg.ApprovalTimeout = d }
}

func startSparkles(t testing.TB, opts ...serverOption) *sparkles {
	t.Helper()
	s := &sparkles{t: t, dir: t.TempDir(), addr: "127.0.0.1:0"}
	for _, o := range opts {
		o(s)
	}
	s.start()
	s.URL = "http://" + s.addr
	s.Client = client.New(s.URL, testToken)
	t.Cleanup(s.stop)
	return s
}

func (s *sparkles) start() {
	s.t.Helper()
	log := slog.New(slog.DiscardHandler)
	st := bolttest.MustOpenAt(s.t, filepath.Join(s.dir, "sparkles.db"), boltstore.Options{Logger: log})
	cfg := s.cfg
	cfg.Store = st
	cfg.DataDir = s.dir
	cfg.Builtins = map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo}
	cfg.DefaultAgent = "demo"
	cfg.Logger = log
	co, err := coordinator.New(cfg)
	if err != nil {
		st.Close()
		s.t.Fatalf("start coordinator: %v", err)
	}
	if err := co.Recover(context.Background()); err != nil {
		co.Close()
		st.Close()
		s.t.Fatalf("recover: %v", err)
	}
	srv := server.New(server.Config{Backend: co, Store: st, Token: testToken, Logger: log, Static: web.Handler(), Webhooks: s.webhooks})
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		co.Close()
		st.Close()
		s.t.Fatalf("listen on %s: %v", s.addr, err)
	}
	s.addr = l.Addr().String()
	r := &running{store: st, coord: co, srv: srv, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(l) }()
	s.mu.Lock()
	s.run = r
	s.mu.Unlock()
}

// stop shuts the server down as serve does on a signal; the data stays.
func (s *sparkles) stop() {
	s.mu.Lock()
	r := s.run
	s.run = nil
	s.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errors.Join(r.srv.Shutdown(ctx), <-r.done, r.coord.Close(), r.store.Close()); err != nil {
		s.t.Errorf("stop server: %v", err)
	}
}

// restart starts a new server on the same database file and port.
func (s *sparkles) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// chromiumPath finds Debian's chromium.
func chromiumPath() (string, bool) {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	p, err := exec.LookPath("chromium")
	return p, err == nil
}

// browser is one tab of the shared headless chromium, for one test.
type browser struct {
	t   *testing.T
	ctx context.Context // the tab; no deadline, so it lives as long as the test

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// actionTimeout bounds each step of a test. The demo agent answers in
// milliseconds; this only stops a broken page from hanging the test.
const actionTimeout = 20 * time.Second

// chromium is the one browser process of the test binary: starting one
// takes seconds, a tab in a fresh browser context (its own storage and
// cookies) takes milliseconds.
var chromium struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chromium.cancel != nil {
		chromium.cancel()
	}
	os.Exit(code)
}

func startChromium(path string) {
	// Every flag that keeps chromium from reaching the network on its own.
	// Without UserDataDir chromedp gives the browser a fresh profile
	// directory and removes it afterwards.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 860),
	)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	chromium.cancel = func() {
		cancelBrowser()
		cancelAlloc()
	}
	chromium.ctx = ctx
	chromium.err = chromedp.Do(ctx)
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if testing.Short() {
		t.Skip("drives chromium: not in -short")
	}
	path, ok := chromiumPath()
	if !ok {
		const how = "chromium is not installed; install it with `apt-get install chromium` to run the browser tests"
		if inCI() {
			t.Fatal(how)
		}
		t.Skip(how)
	}
	chromium.once.Do(func() { startChromium(path) })
	if chromium.err != nil {
		t.Fatalf("start chromium: %v", chromium.err)
	}
	ctx, cancel := chromedp.NewContext(chromium.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	go b.collectConsole(chromedp.Console(ctx))
	// Runs before the tab closes (cleanups run last first).
	t.Cleanup(b.onFailure)
	return b
}

func (b *browser) collectConsole(messages iter.Seq2[chromedp.ConsoleMessage, error]) {
	for m, err := range messages {
		if err != nil {
			return
		}
		b.mu.Lock()
		b.console = append(b.console, m)
		b.mu.Unlock()
	}
}

// noConsoleErrors fails the test if the page logged an error or threw:
// a CSP violation, an exception in a handler, a failed request.
func (b *browser) noConsoleErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			b.t.Fatalf("the page logged an error: %s", m)
		}
	}
}

// onFailure keeps a screenshot of a failed test where it outlives the
// test (t.TempDir does not), and shows the page's console.
func (b *browser) onFailure() {
	if !b.t.Failed() {
		return
	}
	b.mu.Lock()
	for _, m := range b.console {
		b.t.Logf("browser console: %s", m)
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100 is PNG; below it chromium writes JPEG
	if err != nil {
		b.t.Logf("no screenshot: %v", err)
		return
	}
	dir := artifactDir(b.t)
	if dir == "" {
		return
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(b.t.Name())+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("no screenshot: %v", err)
		return
	}
	b.t.Logf("screenshot of the failed page: %s", path)
}

// artifactDir is where files outlive the test: go test -artifacts keeps
// t.ArtifactDir; otherwise a new temporary directory that nobody removes.
func artifactDir(t *testing.T) string {
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir, err := os.MkdirTemp("", "sparkles-web-")
	if err != nil {
		t.Logf("no directory for artifacts: %v", err)
		return ""
	}
	return dir
}

// do runs actions, each bounded by actionTimeout, and fails the test on
// the first error, naming what it waited for.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript condition to hold in the page.
func (b *browser) until(what, js string) {
	b.t.Helper()
	b.do(what, chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(actionTimeout)))
}

// eval returns the value of a JavaScript expression.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// colorScheme makes the page see prefers-color-scheme as scheme.
func (b *browser) colorScheme(scheme string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
	})
	if err != nil {
		b.t.Fatalf("emulate %s: %v", scheme, err)
	}
}

// screenshot returns a PNG of the whole page.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// screenshotOf returns a PNG of the first element that matches a CSS
// selector, at twice the size, for a close look.
func (b *browser) screenshotOf(css string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.ScreenshotScale(chromedp.CSS(css), 2))
	if err != nil {
		b.t.Fatalf("screenshot of %s: %v", css, err)
	}
	return png
}

// ---- the page, as a user drives it ----

// openSandbox loads the console with the token in the address, as serve
// prints it, and opens a sandbox from the list.
func (b *browser) openSandbox(s *sparkles, id string) {
	b.t.Helper()
	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken))
	link := chromedp.CSS(fmt.Sprintf(`#sandbox-list a[href="#/sandboxes/%s"]`, id))
	b.do("open the sandbox from the list", chromedp.WaitVisible(link), chromedp.Click(link))
	b.waitLive()
}

func (b *browser) waitLive() {
	b.t.Helper()
	b.do("the stream is live", chromedp.WaitVisible(chromedp.CSS(`#connection[data-state="live"]`)))
}

// prompt types text into the prompt box and presses Enter.
func (b *browser) prompt(text string) {
	b.t.Helper()
	b.do("send a prompt",
		chromedp.WaitEnabled(chromedp.ID("send")),
		chromedp.SendKeys(chromedp.ID("prompt"), text+"\n"),
	)
}

// jsString quotes s for JavaScript source.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// lastTurn is a JavaScript expression for the last turn's section.
const lastTurn = `[...document.querySelectorAll('#transcript .turn')].at(-1)`

// answerHas is a condition: the last turn's answer contains text.
func answerHas(text string) string {
	return fmt.Sprintf(`(%s?.querySelector('.answer')?.textContent ?? '').includes(%s)`, lastTurn, jsString(text))
}

// turnStatus is a condition: the last turn has the status.
func turnStatus(status string) string {
	return fmt.Sprintf(`%s?.dataset.status === %s`, lastTurn, jsString(status))
}

// viewJS describes what the transcript shows, for comparing two views.
const viewJS = `JSON.stringify([...document.querySelectorAll('#transcript .turn')].map(t => ({
	id: t.dataset.turnId,
	status: t.dataset.status,
	ended: t.querySelector('.turn-foot .badge').textContent,
	decisions: [...t.querySelectorAll('.decision')].map(d => d.textContent),
	prompt: t.querySelector('.prompt-text').textContent,
	reasoning: [...t.querySelectorAll('.reasoning .part')].map(p => p.textContent),
	answer: [...t.querySelectorAll('.answer .part')].map(p => p.textContent),
	tools: [...t.querySelectorAll('.tool')].map(x => x.dataset.status + ' ' + x.querySelector('.tool-title').textContent),
	plan: [...t.querySelectorAll('.plan-entry')].map(e => e.textContent),
	approvals: [...document.querySelectorAll('#pending .approval')].filter(a => a.dataset.turnId === t.dataset.turnId).map(a => a.dataset.approvalId + ' ' + a.querySelector('.approval-title').textContent
		+ ' ' + [...a.querySelectorAll('button')].map(b => b.textContent).join('/')),
})))`

// loggedApproval is one approval as the sandbox's log has it.
type loggedApproval struct {
	turn     string
	request  *sandbox.ApprovalRequested
	resolved *sandbox.ApprovalResolved // nil while pending
}

// option returns the id of the request's option of the given kind.
func (a loggedApproval) option(t *testing.T, kind string) string {
	t.Helper()
	for _, o := range a.request.Options {
		if o.Kind == kind {
			return o.OptionID
		}
	}
	t.Fatalf("approval %s offers no %s option: %+v", a.request.ApprovalID, kind, a.request.Options)
	return ""
}

// approvalLog reads the approvals of a sandbox from its log, oldest first.
func approvalLog(t *testing.T, s *sparkles, id string) []loggedApproval {
	t.Helper()
	page, err := s.Client.Events(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	var out []loggedApproval
	for _, ev := range page.Events {
		switch d := ev.Data.(type) {
		case *sandbox.ApprovalRequested:
			out = append(out, loggedApproval{turn: ev.TurnID, request: d})
		case *sandbox.ApprovalResolved:
			for i := range out {
				if out[i].request.ApprovalID == d.ApprovalID {
					out[i].resolved = d
				}
			}
		}
	}
	return out
}

// buttonsJS lists the text of the buttons of the first approval card.
const buttonsJS = `[...document.querySelectorAll('.approval button')].map(b => b.textContent)`

// viewport makes the tab a window of width × height CSS pixels.
func (b *browser) viewport(width, height int64) {
	b.t.Helper()
	b.do(fmt.Sprintf("a %d×%d window", width, height), chromedp.EmulateViewport(width, height))
}

// saveScreenshot writes png to dir/name and logs where.
func saveScreenshot(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", path)
}

// turnUntil starts a turn from the API and follows the sandbox's stream
// until an event of type typ of that turn arrives; it returns the turn id.
func turnUntil(t *testing.T, s *sparkles, id, input string, typ sandbox.Type) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	stream := s.Client.Stream(ctx, id, client.StreamOptions{Since: client.Since(0)})
	defer stream.Close()
	turn, err := s.Client.StartTurn(ctx, id, input)
	if err != nil {
		t.Fatalf("start a turn: %v", err)
	}
	for m, err := range stream.Events() {
		if err != nil {
			t.Fatalf("wait for %s of turn %s: %v", typ, turn.ID, err)
		}
		if m.Event.TurnID == turn.ID && m.Event.Type == typ {
			return turn.ID
		}
	}
	t.Fatalf("the stream ended before %s of turn %s", typ, turn.ID)
	return ""
}

// unnamedControls lists the visible controls a screen reader could not
// name.
func (b *browser) unnamedControls() []string {
	b.t.Helper()
	return eval[[]string](b, `[...document.querySelectorAll('button, input, textarea, a[href], summary')]
		.filter(e => e.checkVisibility())
		.filter(e => !(e.getAttribute('aria-label') || e.labels?.[0]?.textContent || e.textContent).trim())
		.map(e => e.outerHTML)`)
}

// decisionsJS lists the decision records of the last turn as
// "outcome|title|by".
const decisionsJS = `[...(` + lastTurn + `?.querySelectorAll('.decision') ?? [])].map(d =>
	[...d.children].map(c => c.textContent).join('|'))`

// endedJS is the text of the last turn's end badge.
const endedJS = lastTurn + `?.querySelector('.turn-foot .badge')?.textContent`

// untilJSON waits until the JSON of a JavaScript expression is want, and
// names what the page showed instead when it never is.
func (b *browser) untilJSON(what, js, want string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	cond := fmt.Sprintf(`JSON.stringify(%s) === %s`, js, jsString(want))
	err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(actionTimeout)))
	if err != nil {
		b.t.Fatalf("%s: the page shows %s, want %s (%v)", what, eval[string](b, `JSON.stringify(`+js+`)`), want, err)
	}
}

// decisions waits until the last turn's decision records read want, each
// "outcome|title|by".
func (b *browser) decisions(what string, want ...string) {
	b.t.Helper()
	j, err := json.Marshal(want)
	if err != nil {
		b.t.Fatal(err)
	}
	b.untilJSON(what, decisionsJS, string(j))
}

// ended waits until the last turn's end badge reads want.
func (b *browser) ended(want string) {
	b.t.Helper()
	b.untilJSON("the turn's end", endedJS, `"`+want+`"`)
}
