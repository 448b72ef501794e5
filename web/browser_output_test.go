package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sparkles-dev/sparkles/client"
)

// TestBrowserToolOutput: the console shows what a command printed under
// its tool, without its colours and with the sandbox's secret redacted,
// and how it ended; after a reload, from the snapshot.
func TestBrowserToolOutput(t *testing.T) {
	b := newBrowser(t)
	s := startSparkles(t)
	sb, err := s.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{
		Secrets: map[string]string{"DEMO_TOKEN": "tok-browser-5e4d3c2b1a"}, ToolOutput: true,
	})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	b.openSandbox(s, sb.ID)
	b.prompt("show the output")
	b.until("the turn succeeds", turnStatus("succeeded"))
	const card = `[...` + lastTurn + `.querySelectorAll('.tool')].find(c => c.querySelector('.tool-title').textContent === 'env')`
	const shown = `(() => { const c = ` + card + `; return c ? [c.querySelector('.tool-output').textContent.split('\n').filter(l => l === '$ env' || l.startsWith('DEMO_TOKEN=') || l === 'done'),
		c.querySelector('.tool-output-end').textContent] : null; })()`
	const want = `[["$ env","DEMO_TOKEN=[REDACTED]","done"],"exit code 0"]`
	b.untilJSON("the command's output under its tool", shown, want)
	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.untilJSON("the output again, from the snapshot", shown, want)
	b.noConsoleErrors()
}
