package web_test

// The console in a real browser: headless chromium driven with chromedp
// against a real server with the demo agent. Without chromium these tests
// skip, or fail when CI=true.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func createSandbox(t *testing.T, s *sparkles) string {
	t.Helper()
	sb, err := s.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return sb.ID
}

func TestBrowserPrompt(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)

	// Sign in through the token form, as a user without the printed URL.
	b.do("load the console", chromedp.Navigate(s.URL+"/"))
	b.do("enter the token",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken+"\n"),
		chromedp.WaitVisible(chromedp.ID("new-sandbox")),
	)
	if got, want := eval[string](b, `sessionStorage.getItem('sparkles.token')`), testToken; got != want {
		t.Fatalf("stored token = %q, want %q", got, want)
	}

	b.do("create a sandbox", chromedp.Click(chromedp.ID("new-sandbox")))
	b.waitLive()
	id := eval[string](b, `decodeURIComponent(location.hash.split('/').at(-1))`)
	b.until("the new sandbox is listed and ready",
		fmt.Sprintf(`document.querySelector('#sandbox-list [data-sandbox-id="%s"]')?.dataset.status === 'ready'`, id))

	b.prompt("read README.md and summarize it")
	b.until("the streamed answer", answerHas("That is all from the demo agent."))
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.until("the prompt is shown", fmt.Sprintf(`%s.querySelector('.prompt-text').textContent === 'read README.md and summarize it'`, lastTurn))
	b.until("the reasoning is collapsed", fmt.Sprintf(`(() => { const r = %s.querySelector('details.reasoning');
		return r && !r.hidden && !r.open && r.textContent.includes('Planning the reply.'); })()`, lastTurn))
	b.until("the read tool's card", fmt.Sprintf(`[...%s.querySelectorAll('.tool')].some(c =>
		c.querySelector('.tool-title').textContent === 'Read README.md' && ['completed', 'failed'].includes(c.dataset.status))`, lastTurn))

	// The log agrees with what the page shows.
	page, err := s.Client.Events(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var answer string
	for _, ev := range page.Events {
		if m, ok := ev.Data.(*sandbox.MessageCompleted); ok {
			answer = m.Text
		}
	}
	if got := eval[string](b, lastTurn+`.querySelector('.answer .parts').textContent`); got != answer {
		t.Fatalf("the page shows the answer %q, the log has %q", got, answer)
	}
	b.noConsoleErrors()
}

// TestBrowserApproveInPage: the card's primary button grants one use. The
// demo agent lists its allow_always option first, as real agents do; the
// approval must still answer allow_once, and the next write must ask again.
func TestBrowserApproveInPage(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	id := createSandbox(t, s)
	b.openSandbox(s, id)

	b.prompt("please write notes.txt")
	approve := chromedp.CSS(`.approval button.approve`)
	b.do("the approval card", chromedp.WaitVisible(approve))
	if got, want := eval[string](b, `document.querySelector('.approval .approval-title').textContent`), "Write notes.txt"; got != want {
		t.Fatalf("approval title = %q, want %q", got, want)
	}
	if got, want := fmt.Sprint(eval[[]string](b, buttonsJS)), "[Allow once Deny Always allow writes]"; got != want {
		t.Fatalf("the card's buttons are %s, want %s", got, want)
	}
	b.do("allow once in the page", chromedp.Click(approve), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.until("the write tool completes", fmt.Sprintf(`[...%s.querySelectorAll('.tool')].some(c =>
		c.querySelector('.tool-title').textContent === 'Write notes.txt' && c.dataset.status === 'completed')`, lastTurn))
	b.until("the answer says so", answerHas("I wrote notes.txt."))
	b.until("the turn succeeds", turnStatus("succeeded"))

	log := approvalLog(t, s, id)
	if len(log) != 1 || log[0].resolved == nil {
		t.Fatalf("the log has approvals %+v, want one resolved", log)
	}
	if got, want := log[0].resolved.OptionID, log[0].option(t, sandbox.OptionAllowOnce); got != want {
		t.Fatalf("Allow once answered option %s, want the allow_once option %s", got, want)
	}
	if got, want := log[0].resolved.Decision, sandbox.DecisionApproved; got != want {
		t.Fatalf("decision = %s, want %s", got, want)
	}
	// The card leaves its outcome in the turn, and who gave it.
	b.decisions("the allowed write is kept", "Allowed once|Write notes.txt|in this tab")
	b.ended("succeeded")

	b.prompt("write notes.txt again")
	b.do("the next write asks again", chromedp.WaitVisible(approve))
	// One state everywhere while the approval waits: the header and the
	// sandbox's row in the list.
	b.untilJSON("the header waits for an answer", `document.querySelector('#sandbox-status .badge-short').textContent`, `"waiting"`)
	b.untilJSON("the list row says the same", fmt.Sprintf(`document.querySelector('#sandbox-list [data-sandbox-id="%s"] .badge').textContent`, id), `"waiting"`)
	b.do("deny it", chromedp.Click(chromedp.CSS(".approval button.deny")), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.until("the answer says so", answerHas("You did not let me write notes.txt."))
	// A success with a denial is not a plain success: the agent did not do
	// all it set out to (the CLI exits 3 for it).
	b.decisions("the denied write is kept", "Denied|Write notes.txt|in this tab")
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.ended("succeeded with a denial")
	// The write did not run because it was denied: it did not fail.
	b.untilJSON("the denied tool", deniedToolJS, `"denied denied status-denied"`)
	b.untilJSON("the header is back to the sandbox's status", `document.querySelector('#sandbox-status .badge-short').textContent`, `"ready"`)
	log = approvalLog(t, s, id)
	if len(log) != 2 || log[1].resolved == nil {
		t.Fatalf("the log has approvals %+v, want two resolved", log)
	}
	if got, want := log[1].resolved.OptionID, log[1].option(t, sandbox.OptionRejectOnce); got != want {
		t.Fatalf("Deny answered option %s, want the reject_once option %s", got, want)
	}
	b.noConsoleErrors()
}

// deniedToolJS is the state, badge text and badge class of the last turn's
// write tool.
const deniedToolJS = `(() => { const c = [...` + lastTurn + `.querySelectorAll('.tool')].find(c => c.querySelector('.tool-title').textContent === 'Write notes.txt');
	const b = c?.querySelector('.badge'); return c ? c.dataset.status + ' ' + b.textContent + ' ' + b.className.replace('badge ', '') : ''; })()`

// TestBrowserAlwaysAllow: the lasting option has a button of its own that
// says so and sends that option; the agent then stops asking.
func TestBrowserAlwaysAllow(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	id := createSandbox(t, s)
	b.openSandbox(s, id)

	b.prompt("please write notes.txt")
	always := chromedp.CSS(`.approval button.allow_always`)
	b.do("the approval card", chromedp.WaitVisible(always))
	if got, want := eval[string](b, `document.querySelector('.approval button.allow_always').getAttribute('aria-label')`),
		"Always allow writes (Write notes.txt)"; got != want {
		t.Fatalf("the always button's name = %q, want %q", got, want)
	}
	if got, want := eval[string](b, `(() => { const b = document.querySelector('.approval button.allow_always');
		return document.getElementById(b.getAttribute('aria-describedby'))?.textContent ?? ''; })()`),
		"An “Always” choice lasts: the agent may stop asking before actions like this one."; got != want {
		t.Fatalf("the always button is described by %q, want %q", got, want)
	}
	b.do("always allow in the page", chromedp.Click(always), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.until("the answer says so", answerHas("I wrote notes.txt."))
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.decisions("the lasting choice is kept", "Always allowed|Write notes.txt|in this tab")

	log := approvalLog(t, s, id)
	if len(log) != 1 || log[0].resolved == nil {
		t.Fatalf("the log has approvals %+v, want one resolved", log)
	}
	if got, want := log[0].resolved.OptionID, log[0].option(t, sandbox.OptionAllowAlways); got != want {
		t.Fatalf("the always button answered option %s, want the allow_always option %s", got, want)
	}

	b.prompt("write notes.txt again")
	b.until("the next write turn succeeds", `document.querySelectorAll('#transcript .turn').length === 2 && `+
		turnStatus("succeeded")+` && `+answerHas("I wrote notes.txt."))
	if log := approvalLog(t, s, id); len(log) != 1 {
		t.Fatalf("the agent asked again after always allow: %+v", log)
	}
	b.noConsoleErrors()
}

func TestBrowserApprovedElsewhere(t *testing.T) {
	ctx := context.Background()
	b := newBrowser(t)
	s := startSparkles(t)
	id := createSandbox(t, s)
	b.openSandbox(s, id)

	// The turn starts from the API, not the page: the page shows it all the
	// same, and its approval card goes when the API answers the approval.
	stream := s.Client.Stream(ctx, id, client.StreamOptions{})
	defer stream.Close()
	if _, err := s.Client.StartTurn(ctx, id, "write notes.txt"); err != nil {
		t.Fatal(err)
	}
	var approvalID string
	for m, err := range stream.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := m.Event.Data.(*sandbox.ApprovalRequested); ok {
			approvalID = a.ApprovalID
			break
		}
	}
	card := chromedp.CSS(fmt.Sprintf(`.approval[data-approval-id="%s"]`, approvalID))
	b.do("the approval card", chromedp.WaitVisible(card))

	if _, err := s.Client.Decide(ctx, id, approvalID, client.Approve); err != nil {
		t.Fatal(err)
	}
	b.do("the card goes", chromedp.WaitNotPresent(card))
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.until("the answer says so", answerHas("I wrote notes.txt."))
	b.decisions("the decision made elsewhere is kept", "Allowed once|Write notes.txt|elsewhere")
	b.noConsoleErrors()
}

func TestBrowserReloadMidTurn(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.openSandbox(s, createSandbox(t, s))

	// The turn waits on the approval: it stays open across the reload,
	// its plan and its usage so far with it (from the snapshot).
	b.prompt("write notes.txt, with a plan and usage")
	b.do("the approval card", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
	b.until("the read tool's card", fmt.Sprintf(`%s.querySelectorAll('.tool').length === 2`, lastTurn))
	b.untilJSON("the plan: read done, write in progress", `[...`+lastTurn+`.querySelectorAll('.plan-entry')].map(e => e.textContent)`,
		`["✓Read notes.txt","◐Write notes.txt","○Reply"]`)
	usageJS := lastTurn + `.querySelector('.turn-detail').textContent`
	b.until("the usage so far", fmt.Sprintf(`/^[0-9,]+ tokens · 0\.[0-9]{4} USD$/.test(%s)`, usageJS))
	before, usage := eval[string](b, viewJS), eval[string](b, usageJS)

	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.do("the approval card is back", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
	if after := eval[string](b, viewJS); after != before {
		t.Fatalf("the view changed across the reload:\nbefore %s\nafter  %s", before, after)
	}
	if after := eval[string](b, usageJS); after != usage {
		t.Fatalf("the usage changed across the reload: %q, then %q", usage, after)
	}
	if got, want := eval[bool](b, `document.getElementById('cancel-turn').disabled`), false; got != want {
		t.Fatalf("cancel disabled = %v, want %v while the turn runs", got, want)
	}

	b.do("deny in the page", chromedp.Click(chromedp.CSS(".approval button.deny")), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.until("the answer says so", answerHas("You did not let me write notes.txt."))
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.untilJSON("the plan is done", `[...`+lastTurn+`.querySelectorAll('.plan-entry')].map(e => e.textContent)`,
		`["✓Read notes.txt","✓Write notes.txt","✓Reply"]`)
	b.decisions("the denial is kept", "Denied|Write notes.txt|in this tab")
	b.ended("succeeded with a denial")
	denied := eval[string](b, viewJS)

	// The snapshot holds pending approvals only: the page reads the end of
	// the log for what became of the others, and the tab remembers which
	// it answered itself.
	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.decisions("the denial is still there", "Denied|Write notes.txt|in this tab")
	b.ended("succeeded with a denial")
	// The snapshot's tools come before the denial read from the log.
	b.untilJSON("the denied tool is still denied", deniedToolJS, `"denied denied status-denied"`)
	if after := eval[string](b, viewJS); after != denied {
		t.Fatalf("the view changed across the reload:\nbefore %s\nafter  %s", denied, after)
	}
	b.noConsoleErrors()
}

func TestBrowserCancel(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.openSandbox(s, createSandbox(t, s))

	b.prompt("hang")
	b.until("the first chunk", answerHas("Working on it..."))
	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.until("the chunk is back", answerHas("Working on it..."))
	b.until("the turn runs", turnStatus("running"))
	b.do("cancel the turn", chromedp.WaitEnabled(chromedp.ID("cancel-turn")), chromedp.Click(chromedp.ID("cancel-turn")))
	b.until("the turn is canceled", turnStatus("canceled"))
	b.do("the prompt box is free again", chromedp.WaitEnabled(chromedp.ID("send")))
}

func TestBrowserServerRestart(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.openSandbox(s, createSandbox(t, s))

	b.prompt("hang")
	b.until("the first chunk", answerHas("Working on it..."))

	s.stop()
	b.do("the page notices", chromedp.WaitVisible(chromedp.CSS(`#connection[data-state="reconnecting"]`)))
	// It says so where it cannot be missed, and does not offer to send.
	b.do("the banner", chromedp.WaitVisible(chromedp.CSS(`#offline[data-kind="reconnecting"]`)))
	if got, want := eval[string](b, `document.getElementById('offline-title').textContent`), "Reconnecting to the server…"; got != want {
		t.Fatalf("the banner says %q, want %q", got, want)
	}
	if !eval[bool](b, `document.getElementById('send').disabled && document.getElementById('cancel-turn').disabled`) {
		t.Fatal("Send or Cancel turn is enabled while the page cannot reach the server")
	}
	if got, want := eval[string](b, `document.getElementById('turn-status').textContent`), "Not connected: sending is paused."; got != want {
		t.Fatalf("the turn status says %q, want %q", got, want)
	}
	b.do("type and press Enter", chromedp.SendKeys(chromedp.ID("prompt"), "hello while away\n"))
	if got := eval[string](b, `document.getElementById('prompt').value.trim()`); got != "hello while away" {
		t.Fatalf("the prompt box holds %q: Enter sent it while offline", got)
	}
	if got := eval[int](b, `document.querySelectorAll('#transcript .turn').length`); got != 1 {
		t.Fatalf("%d turns shown: Enter sent the prompt while offline", got)
	}
	if eval[bool](b, `!document.getElementById('notice').hidden`) {
		t.Fatalf("a notice while offline: %s", eval[string](b, `document.getElementById('notice-text').textContent`))
	}
	eval[bool](b, `(document.getElementById('prompt').value = '') === ''`)
	s.restart()
	b.waitLive()
	b.do("the banner goes", chromedp.WaitNotVisible(chromedp.ID("offline")))

	// The open turn was closed by the shutdown or the restart; the page
	// catches up on how, and the sandbox takes the next prompt.
	b.until("the hung turn ends", fmt.Sprintf(`['failed', 'canceled'].includes(%s?.dataset.status)`, lastTurn))
	// The agent stopped with the server: that is idle, not broken.
	b.untilJSON("the header says the agent is idle", `document.querySelector('#sandbox-status .badge-long').textContent`,
		`"idle — starts with the next prompt"`)
	b.untilJSON("the list says so too", `document.querySelector('#sandbox-list .sb-item .badge').textContent`, `"idle"`)
	b.prompt("hello again")
	b.until("the next turn's answer", answerHas(`You asked: "hello again".`))
	b.until("the next turn succeeds", turnStatus("succeeded"))
	if got, want := eval[int](b, `document.querySelectorAll('#transcript .turn').length`), 2; got != want {
		t.Fatalf("turns shown = %d, want %d", got, want)
	}
}

func TestBrowserKeyboard(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.openSandbox(s, createSandbox(t, s))

	b.prompt("write notes.txt")
	b.do("the approval card", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))

	// Every control has a name a screen reader can say.
	if unnamed := b.unnamedControls(); len(unnamed) > 0 {
		t.Fatalf("controls without a name: %v", unnamed)
	}

	// From the prompt box, Shift+Tab walks back through the approval's
	// buttons, the lasting one last; Enter answers it.
	b.do("focus the prompt", chromedp.Focus(chromedp.ID("prompt")))
	var walked []string
	for range 3 {
		b.do("Shift+Tab", chromedp.KeyEvent(kb.Tab, chromedp.KeyModifiers(chromedp.ModifierShift)))
		walked = append(walked, eval[string](b, `document.activeElement.getAttribute('aria-label')`))
	}
	want := []string{"Always allow writes (Write notes.txt)", "Deny: Write notes.txt", "Allow once: Write notes.txt"}
	if fmt.Sprint(walked) != fmt.Sprint(want) {
		t.Fatalf("Shift+Tab from the prompt walked %q, want %q", walked, want)
	}
	b.do("press Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
	b.until("the turn succeeds", turnStatus("succeeded"))
	b.until("the answer says so", answerHas("I wrote notes.txt."))
}

// TestBrowserEarlierTurns: after a reload the page shows the last turn from
// the snapshot and offers the ones before it; shown, they read from the log
// exactly as the page had shown them live.
func TestBrowserEarlierTurns(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	id := createSandbox(t, s)
	b.openSandbox(s, id)

	b.prompt("read README.md and summarize it")
	b.until("the first turn succeeds", turnStatus("succeeded"))
	b.prompt("please write notes.txt")
	approve := chromedp.CSS(`.approval button.approve`)
	b.do("approve in the page", chromedp.WaitVisible(approve), chromedp.Click(approve))
	b.until("the second turn succeeds", turnStatus("succeeded"))
	b.prompt("hello")
	b.until("the third turn succeeds", `document.querySelectorAll('#transcript .turn').length === 3 && `+turnStatus("succeeded"))
	live := eval[string](b, viewJS)

	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.until("only the last turn, from the snapshot", `document.querySelectorAll('#transcript .turn').length === 1 && `+turnStatus("succeeded"))
	earlier := chromedp.ID("earlier-turns")
	b.do("show earlier turns", chromedp.WaitVisible(earlier), chromedp.Click(earlier))
	b.until("three turns", `document.querySelectorAll('#transcript .turn').length === 3 && document.getElementById('earlier-turns').hidden`)
	if got := eval[string](b, viewJS); got != live {
		t.Fatalf("earlier turns read from the log differ from what the page showed live:\nlive %s\nread %s", live, got)
	}
	// The page still runs the next turn as the current one.
	b.prompt("hello again")
	b.until("the fourth turn succeeds", `document.querySelectorAll('#transcript .turn').length === 4 && `+turnStatus("succeeded"))

	// A sandbox with one turn has nothing earlier to offer.
	one := createSandbox(t, s)
	b.openSandbox(s, one)
	b.prompt("hello")
	b.until("its turn succeeds", turnStatus("succeeded"))
	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.until("the page looked into the log", fmt.Sprintf(`document.getElementById('earlier-turns').dataset.checked === %s`, jsString(one)))
	if !eval[bool](b, `document.getElementById('earlier-turns').hidden`) {
		t.Fatal("a sandbox with one turn offers earlier turns")
	}
	b.noConsoleErrors()
}

// TestBrowserApprovalOutcomes: an approval nobody answers keeps its outcome
// too, and says why it ended.
func TestBrowserApprovalOutcomes(t *testing.T) {
	t.Run("Canceled", func(t *testing.T) {
		b := newBrowser(t)
		s := startSparkles(t)
		b.openSandbox(s, createSandbox(t, s))

		b.prompt("write notes.txt")
		b.do("the approval card", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")))
		b.do("cancel the turn", chromedp.Click(chromedp.ID("cancel-turn")), chromedp.WaitNotPresent(chromedp.CSS(".approval")))
		b.decisions("the canceled approval is kept", "Canceled|Write notes.txt|the turn was canceled")
		b.until("the turn is canceled", turnStatus("canceled"))
		b.ended("canceled")
		b.noConsoleErrors()
	})

	t.Run("TimedOut", func(t *testing.T) {
		b := newBrowser(t)
		s := startSparkles(t, withApprovalTimeout(time.Second))
		b.openSandbox(s, createSandbox(t, s))

		b.prompt("write notes.txt")
		b.decisions("the expired approval is kept", "Timed out|Write notes.txt|nobody answered in time")
		b.until("the turn ends", fmt.Sprintf(`['succeeded', 'failed', 'canceled'].includes(%s?.dataset.status)`, lastTurn))
		if got := eval[string](b, endedJS); strings.Contains(got, "denial") {
			t.Fatalf("the turn ended %q: nobody denied anything", got)
		}
		b.noConsoleErrors()
	})
}

// TestBrowserMissingSandbox: the address names a sandbox the server does
// not have: the page says so and offers nothing to do in it.
func TestBrowserMissingSandbox(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	b.do("load the console at a sandbox that is not there",
		chromedp.Navigate(s.URL+"/#token="+testToken),
		chromedp.WaitVisible(chromedp.ID("new-sandbox")),
		chromedp.Navigate(s.URL+"/#/sandboxes/c_doesnotexist"),
	)
	b.do("the banner", chromedp.WaitVisible(chromedp.CSS(`#offline[data-kind="missing"]`)))
	if got, want := eval[string](b, `document.getElementById('offline-title').textContent`), "This sandbox does not exist."; got != want {
		t.Fatalf("the banner says %q, want %q", got, want)
	}
	for _, id := range []string{"prompt", "send", "cancel-turn", "delete-sandbox"} {
		if !eval[bool](b, fmt.Sprintf(`document.getElementById(%s).disabled`, jsString(id))) {
			t.Errorf("#%s is enabled in a sandbox that does not exist", id)
		}
	}
	if !eval[bool](b, `document.getElementById('guide').hidden`) {
		t.Error("a sandbox that does not exist offers example prompts")
	}
}
