package web_test

// The console's list, its guidance for an empty server and an empty
// sandbox, and its layout on a phone, in headless chromium.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// rowJS is a JavaScript expression for the list row of a sandbox.
func rowJS(id string) string {
	return fmt.Sprintf(`document.querySelector(%s)`, jsString(fmt.Sprintf(`#sandbox-list .sb-item[data-sandbox-id="%s"]`, id)))
}

// rowsJS describes the rows of the list, top first, as "name|badge".
const rowsJS = `[...document.querySelectorAll('#sandbox-list .sb-item')].map(li =>
	li.querySelector('.sb-name').textContent + '|' + li.querySelector('.badge').textContent)`

// TestBrowserSandboxList: rows a person can tell apart — a name, the last
// activity, a running turn — newest first, deleted ones out of the way.
func TestBrowserSandboxList(t *testing.T) {
	ctx := context.Background()
	b := newBrowser(t)
	s := startSparkles(t)

	named, err := s.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"name": "Release notes"}})
	if err != nil {
		t.Fatal(err)
	}
	prompted := createSandbox(t, s)
	turnUntil(t, s, prompted, "read README.md and summarize it in one line, please, with every detail that matters", sandbox.TypeTurnCompleted)
	fresh := createSandbox(t, s)
	gone := createSandbox(t, s)
	if _, err := s.Client.DeleteSandbox(ctx, gone); err != nil {
		t.Fatal(err)
	}
	busy := createSandbox(t, s)
	turnUntil(t, s, busy, "hang", sandbox.TypeMessageUpdated)

	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken))
	// Newest first, as ids sort; the deleted one is hidden; the running
	// turn shows; a name is metadata.name, else the first prompt (cut to
	// fit), else it says the sandbox is new.
	b.untilJSON("the rows", rowsJS, `["hang|running","New sandbox|ready",`+
		`"read README.md and summarize it in one line, please, with e…|ready","Release notes|ready"]`)
	if got := eval[string](b, rowJS(busy)+`.dataset.turn`); got != "running" {
		t.Fatalf("the busy row's turn is %q, want running", got)
	}
	if got := eval[string](b, rowJS(prompted)+`.querySelector('.sb-link').title`); got !=
		"read README.md and summarize it in one line, please, with every detail that matters\n"+prompted {
		t.Fatalf("the prompted row's title is %q, want the whole prompt and the id", got)
	}
	if got := eval[string](b, rowJS(named.ID)+`.querySelector('.sb-meta').textContent`); got != "demo · active just now" {
		t.Fatalf("the row's last activity reads %q", got)
	}

	// The deleted sandbox is one click away.
	b.untilJSON("the toggle counts it", `document.getElementById('show-deleted-text').textContent`, `"Show deleted (1)"`)
	b.do("show deleted", chromedp.Click(chromedp.ID("show-deleted")))
	b.untilJSON("the deleted row", rowJS(gone)+`?.querySelector('.badge').textContent`, `"deleted"`)
	b.do("hide deleted", chromedp.Click(chromedp.ID("show-deleted")))
	b.until("the deleted row goes", rowJS(gone)+` === null`)

	// The open sandbox's row follows its stream: its first prompt names
	// it, and it runs while the turn runs.
	b.openSandbox(s, fresh)
	b.prompt("hang")
	b.untilJSON("the row runs", rowJS(fresh)+`.querySelector('.badge').textContent`, `"running"`)
	b.untilJSON("the first prompt names it", rowJS(fresh)+`.querySelector('.sb-name').textContent`, `"hang"`)
	b.untilJSON("the header too", `document.getElementById('sandbox-title').textContent`, `"hang"`)
	b.do("cancel the turn", chromedp.WaitEnabled(chromedp.ID("cancel-turn")), chromedp.Click(chromedp.ID("cancel-turn")))
	b.until("the row is ready again", rowJS(fresh)+`.dataset.turn === ''`)
	b.noConsoleErrors()
}

// TestBrowserGuide: an empty server says what a sandbox is and makes one;
// an empty sandbox of the demo agent offers the words it follows.
func TestBrowserGuide(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)

	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken), chromedp.WaitVisible(chromedp.ID("intro")))
	if got := eval[string](b, `document.getElementById('intro').textContent`); !strings.Contains(got, "A sandbox is a private working directory") || !strings.Contains(got, "Create a sandbox") {
		t.Fatalf("the welcome reads %q", got)
	}
	b.do("create one from the welcome", chromedp.Click(chromedp.ID("intro-create")))
	b.waitLive()
	b.do("the guide", chromedp.WaitVisible(chromedp.ID("guide")))
	if got, want := fmt.Sprint(eval[[]string](b, `[...document.querySelectorAll('#examples .example')].map(e => e.dataset.prompt)`)),
		"[write notes.txt read README.md slow hang env crash]"; got != want {
		t.Fatalf("the demo's examples are %s, want %s", got, want)
	}
	if unnamed := b.unnamedControls(); len(unnamed) > 0 {
		t.Fatalf("controls without a name: %v", unnamed)
	}
	b.do("pick an example", chromedp.Click(chromedp.CSS(`#examples .example[data-prompt="write notes.txt"]`)))
	if got := eval[string](b, `document.activeElement.id + ' ' + document.activeElement.value`); got != "prompt write notes.txt" {
		t.Fatalf("after the example, the focus is on %q, want the prompt box with the example", got)
	}
	b.prompt("")
	b.do("it runs", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
	if !eval[bool](b, `document.getElementById('guide').hidden`) {
		t.Fatal("the guide stays once the sandbox has a turn")
	}
	b.noConsoleErrors()
}

// TestBrowserPhone: at 390 px the list is a view of its own, the open
// sandbox gets the whole height, and a pending approval stays in view.
func TestBrowserPhone(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.viewport(390, 844)

	// An empty server: the welcome shows under the list's head.
	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken), chromedp.WaitVisible(chromedp.ID("intro")))

	id := createSandbox(t, s)
	for _, p := range []string{"read README.md and summarize it", "hello there", "slow"} {
		turnUntil(t, s, id, p, sandbox.TypeTurnCompleted)
	}
	b.do("reload", chromedp.Reload())
	link := chromedp.CSS(fmt.Sprintf(`#sandbox-list a[href="#/sandboxes/%s"]`, id))
	b.do("the list is the view", chromedp.WaitVisible(link))
	if !eval[bool](b, `!document.querySelector('.main').checkVisibility()`) {
		t.Fatal("the sandbox pane shows beside the list on a phone")
	}
	b.do("open the sandbox", chromedp.Click(link))
	b.waitLive()
	if eval[bool](b, `document.querySelector('.sidebar').checkVisibility()`) {
		t.Fatal("the list stays on screen with a sandbox open")
	}
	// The keyboard moves with the view.
	if got := eval[string](b, `document.activeElement.id`); got != "sandbox-title" {
		t.Fatalf("with the sandbox open the focus is on %q, want its name", got)
	}
	if got := eval[int](b, `document.getElementById('transcript-scroll').clientHeight`); got < 844*6/10 {
		t.Fatalf("the transcript is %d px high of 844", got)
	}
	if got := eval[int](b, `document.documentElement.scrollWidth`); got > 390 {
		t.Fatalf("the page is %d px wide at 390", got)
	}

	// Scrolled back to the top, the approval still shows, above the
	// prompt box, and takes a tap; its line in the turn points at it.
	b.prompt("write notes.txt")
	b.do("the approval card", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
	inView := `(() => { const c = document.querySelector('.approval').getBoundingClientRect();
		const f = document.getElementById('prompt-form').getBoundingClientRect();
		return c.top >= 0 && c.bottom <= f.top && f.bottom <= innerHeight; })()`
	b.until("the card is in view", inView)
	eval[bool](b, `(document.getElementById('transcript-scroll').scrollTop = 0) === 0`)
	b.until("the first turn is in view", `document.getElementById('transcript-scroll').scrollTop === 0`)
	if !eval[bool](b, inView) {
		t.Fatal("scrolled up, the pending approval is out of view")
	}
	b.decisions("the waiting line", "Waiting|Write notes.txt|answer it below")
	b.do("allow it", chromedp.Click(chromedp.CSS(".approval button.approve")), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.decisions("the decision is kept", "Allowed once|Write notes.txt|in this tab")

	// Back to the list.
	b.do("back", chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(link))
	if eval[bool](b, `document.getElementById('sandbox').checkVisibility()`) {
		t.Fatal("the sandbox stays on screen after going back")
	}
	if got, want := eval[string](b, `document.activeElement.getAttribute('href') ?? ''`), "#/sandboxes/"+id; got != want {
		t.Fatalf("back in the list the focus is on %q, want the row left", got)
	}
	b.noConsoleErrors()
}

// TestBrowserScreenshots saves the page in light and dark, at 1280 and 390
// px, to the directory SPARKLES_WEB_SCREENSHOTS names, for a person to look
// at: the list and a transcript with a denial kept and an approval pending,
// the phone's two views, an empty server and an empty sandbox, and the
// banner of a lost connection.
func TestBrowserScreenshots(t *testing.T) {
	dir := os.Getenv("SPARKLES_WEB_SCREENSHOTS")
	if dir == "" {
		t.Skip("set SPARKLES_WEB_SCREENSHOTS to a directory to save screenshots of the page")
	}
	ctx := context.Background()
	b := newBrowser(t)
	s := startSparkles(t)
	shoot := func(name string) {
		for _, scheme := range []string{"light", "dark"} {
			b.colorScheme(scheme)
			saveScreenshot(t, dir, name+"-"+scheme+".png", b.screenshot())
		}
	}

	b.viewport(390, 844)
	b.do("load the console", chromedp.Navigate(s.URL+"/#token="+testToken), chromedp.WaitVisible(chromedp.ID("intro")))
	shoot("empty-server-390")
	b.viewport(1280, 900)
	shoot("empty-server-1280")
	b.do("create one from the welcome", chromedp.Click(chromedp.ID("intro-create")))
	b.waitLive()
	b.do("the guide", chromedp.WaitVisible(chromedp.ID("guide")))
	shoot("empty-sandbox-1280")
	b.viewport(390, 844)
	shoot("empty-sandbox-390")

	if _, err := s.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"name": "Release notes"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.DeleteSandbox(ctx, createSandbox(t, s)); err != nil {
		t.Fatal(err)
	}
	busy := createSandbox(t, s)
	turnUntil(t, s, busy, "hang", sandbox.TypeMessageUpdated)
	id := createSandbox(t, s)
	turnUntil(t, s, id, "read README.md and summarize it", sandbox.TypeTurnCompleted)

	b.viewport(1280, 900)
	b.openSandbox(s, id)
	b.prompt("please write notes.txt")
	b.do("deny", chromedp.WaitVisible(chromedp.CSS(".approval button.deny")), chromedp.Click(chromedp.CSS(".approval button.deny")))
	b.ended("succeeded with a denial")
	b.prompt("now write notes.txt please")
	b.do("the approval card", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
	shoot("sandbox-1280")
	for _, scheme := range []string{"light", "dark"} {
		b.colorScheme(scheme)
		saveScreenshot(t, dir, "approval-"+scheme+".png", b.screenshotOf(`.approval`))
	}
	// The turn before, with its denial kept; the pending card stays.
	eval[bool](b, `(document.querySelector('#transcript .turn:nth-last-child(2) .turn-foot').scrollIntoView({block: 'center'}), true)`)
	shoot("sandbox-1280-scrolled")

	b.viewport(390, 844)
	eval[bool](b, `(document.getElementById('transcript-scroll').scrollTop = 0) === 0`)
	shoot("sandbox-390")
	b.do("back to the list", chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("sandbox-list")))
	shoot("list-390")

	b.do("open it again", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sandbox-list a[href="#/sandboxes/%s"]`, id))))
	b.waitLive()
	s.stop()
	b.do("the banner", chromedp.WaitVisible(chromedp.CSS(`#offline[data-kind="reconnecting"]`)))
	shoot("reconnecting-390")
	b.viewport(1280, 900)
	shoot("reconnecting-1280")

	// After a restart the agents are stopped: idle, not broken.
	s.restart()
	b.waitLive()
	b.until("idle", `document.querySelector('#sandbox-status .badge-long').textContent.startsWith('idle')`)
	shoot("restarted-1280")
}
