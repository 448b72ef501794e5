package web_test

// The workspace in the console, in headless chromium at a desktop and a
// phone width: the Files pane (tree, viewer, upload by drop, the archive),
// a finished turn's changes and diff, and revert with its confirmation.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// treeJS lists the Files pane's entries in the order shown, "type path".
const treeJS = `[...document.querySelectorAll('#files-tree .node')].map(n => n.dataset.type + ' ' + n.dataset.path)`

// turnJS is a JavaScript expression for the section of turn id.
func turnJS(id string) string {
	return fmt.Sprintf(`document.querySelector(%s)`, jsString(`#transcript .turn[data-turn-id="`+id+`"]`))
}

// changedJS lists a turn's changed files as "change path lines".
func changedJS(turn string) string {
	return `[...` + turn + `.querySelectorAll('.changed')].map(li =>
		li.dataset.change + ' ' + li.dataset.path + ' ' + li.querySelector('.changed-lines').textContent)`
}

// showFiles opens or closes the Files pane with its button in the header.
func (b *browser) showFiles(open bool) {
	b.t.Helper()
	if eval[bool](b, `document.getElementById('files-toggle').getAttribute('aria-expanded') === 'true'`) != open {
		b.do("the Files button", chromedp.Click(chromedp.ID("files-toggle")))
	}
	if open {
		b.do("the Files pane", chromedp.WaitVisible(chromedp.ID("files")))
	} else {
		b.do("the transcript", chromedp.WaitVisible(chromedp.ID("transcript-scroll")))
	}
}

// denyDownloads keeps the browser from writing downloads to disk; the
// test sees what the page hands over through URL.createObjectURL.
func (b *browser) denyDownloads() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior:         cdpbrowser.SetDownloadBehaviorBehaviorDeny,
		BrowserContextID: chromedp.FromContext(b.ctx).BrowserContextID,
	})
	if err != nil {
		b.t.Fatalf("deny downloads: %v", err)
	}
	eval[bool](b, `(() => { window.savedBlobs = []; const make = URL.createObjectURL.bind(URL);
		URL.createObjectURL = (blob) => { window.savedBlobs.push(blob); return make(blob); }; return true; })()`)
}

// evalAwait returns the value of a JavaScript expression that is a promise.
func evalAwait[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// drop drops files onto the element that css selects, as a drag from the
// desktop does; files maps a name to its bytes.
func (b *browser) drop(css string, files map[string][]byte) {
	b.t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	var adds strings.Builder
	for _, n := range names {
		j, err := json.Marshal(files[n]) // base64
		if err != nil {
			b.t.Fatal(err)
		}
		fmt.Fprintf(&adds, "dt.items.add(new File([Uint8Array.from(atob(%s), c => c.charCodeAt(0))], %s));\n", j, jsString(n))
	}
	eval[bool](b, fmt.Sprintf(`(() => {
		const dt = new DataTransfer();
		%s
		const el = document.querySelector(%s);
		for (const type of ['dragenter', 'dragover', 'drop']) {
			el.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
		}
		return true;
	})()`, adds.String(), jsString(css)))
}

func readFile(t *testing.T, s *sparkles, id, path string) string {
	t.Helper()
	r, _, err := s.Client.ReadFile(context.Background(), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// diffLines are the lines of a unified diff from its first hunk on, as
// the page shows them: "kind text".
func diffLines(diff string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		if strings.HasPrefix(l, "@@") {
			in = true
			out = append(out, "hunk "+l)
			continue
		}
		if !in {
			continue
		}
		kind := map[byte]string{'+': "add", '-': "del", '\\': "note"}[l[0]]
		if kind == "" {
			kind = "ctx"
		}
		out = append(out, kind+" "+l)
	}
	return out
}

func TestBrowserFiles(t *testing.T) {
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"Desktop", 1200, 860}, {"Phone", 390, 844}} {
		t.Run(size.name, func(t *testing.T) { testBrowserFiles(t, size.width, size.height) })
	}
}

func testBrowserFiles(t *testing.T, width, height int64) {
	ctx := context.Background()
	phone := width < 720
	b := newBrowser(t)
	s := startSparkles(t)
	id := createSandbox(t, s)
	b.viewport(width, height)
	b.openSandbox(s, id)
	b.denyDownloads()
	shots := os.Getenv("SPARKLES_WEB_SCREENSHOTS")
	shoot := func(name string) {
		if shots == "" {
			return
		}
		for _, scheme := range []string{"dark", "light"} {
			b.colorScheme(scheme)
			saveScreenshot(t, shots, fmt.Sprintf("files-%d-%s-%s.png", width, name, scheme), b.screenshot())
		}
	}
	noWiderThanScreen := func(what string) {
		t.Helper()
		if got := eval[int64](b, `document.documentElement.scrollWidth`); got > width {
			t.Fatalf("%s: the page is %d px wide at %d", what, got, width)
		}
	}

	// A new sandbox's workspace is empty, and the pane says what to do.
	b.showFiles(true)
	b.until("the empty tree", `document.querySelector('#files-tree .tree-empty')?.textContent.startsWith('No files yet')`)
	if unnamed := b.unnamedControls(); len(unnamed) > 0 {
		t.Fatalf("controls without a name: %v", unnamed)
	}
	// Beside the transcript on a desktop, in its place on a phone.
	if got, want := eval[bool](b, `document.getElementById('transcript-scroll').checkVisibility()`), !phone; got != want {
		t.Fatalf("with the Files pane open, the transcript shows: %v, want %v", got, want)
	}
	noWiderThanScreen("the Files pane")
	if phone {
		b.showFiles(false)
	}

	// The agent writes a file: the turn lists it, the tree shows it.
	b.prompt("write docs/notes.md")
	b.do("allow the write", chromedp.WaitVisible(chromedp.CSS(".approval button.approve")), chromedp.Click(chromedp.CSS(".approval button.approve")))
	b.until("the write turn succeeds", turnStatus("succeeded"))
	writeTurn := eval[string](b, lastTurn+`.dataset.turnId`)
	turn := turnJS(writeTurn)
	b.untilJSON("the turn's changes", changedJS(turn), `["added docs/notes.md "]`)
	if got, want := eval[string](b, turn+`.querySelector('.changes-summary').textContent`), "1 file changed: 1 added"; got != want {
		t.Fatalf("the changes say %q, want %q", got, want)
	}

	// Its diff, line for line what the server's diff says, coloured by
	// kind; the file's line counts follow.
	diff, err := s.Client.Diff(ctx, id, writeTurn)
	if err != nil {
		t.Fatal(err)
	}
	b.do("show the diff", chromedp.Click(chromedp.CSS(`#transcript .turn[data-turn-id="`+writeTurn+`"] .changes-diff`)))
	b.until("the diff", turn+`.querySelector('.diff').dataset.state === 'loaded'`)
	wantLines, err := json.Marshal(diffLines(diff))
	if err != nil {
		t.Fatal(err)
	}
	b.untilJSON("the diff's lines", `[...`+turn+`.querySelectorAll('.diff-file[data-path="docs/notes.md"] .dl')].map(l =>
		l.className.replace('dl dl-', '') + ' ' + l.textContent)`, string(wantLines))
	if !strings.Contains(string(wantLines), "add +Prompt: write docs/notes.md") {
		t.Fatalf("the server's diff lacks the written line: %s", diff)
	}
	b.untilJSON("the line counts", changedJS(turn), `["added docs/notes.md +2−0"]`)
	if got := eval[string](b, `getComputedStyle(`+turn+`.querySelector('.dl-add')).backgroundColor`); got == eval[string](b, `getComputedStyle(`+turn+`.querySelector('.dl-ctx') ?? document.body).backgroundColor`) {
		t.Fatalf("added lines are not coloured: %s", got)
	}
	noWiderThanScreen("the diff")
	shoot("diff")
	// A changed file's name opens it.
	b.do("open the changed file", chromedp.Click(chromedp.CSS(`#transcript .turn[data-turn-id="`+writeTurn+`"] button.changed-path`)))
	b.until("the viewer shows it", `document.getElementById('file-viewer').dataset.state === 'text' &&
		document.getElementById('viewer-title').textContent === 'docs/notes.md'`)
	b.do("close the viewer", chromedp.Click(chromedp.ID("viewer-close")), chromedp.WaitNotVisible(chromedp.ID("file-viewer")))

	// The tree: a directory opens on a click; a file opens in the viewer.
	b.showFiles(true)
	b.untilJSON("the tree", treeJS, `["dir docs"]`)
	b.do("open the directory", chromedp.Click(chromedp.CSS(`#files-tree .node[data-path="docs"] > .node-name`)))
	b.untilJSON("the tree", treeJS, `["dir docs","file docs/notes.md"]`)
	b.do("open the file", chromedp.Click(chromedp.CSS(`#files-tree .node[data-path="docs/notes.md"] > .node-name`)))
	b.until("the viewer shows text", `document.getElementById('file-viewer').dataset.state === 'text'`)
	if got, want := eval[string](b, `document.querySelector('#viewer-body pre').textContent`), readFile(t, s, id, "docs/notes.md"); got != want {
		t.Fatalf("the viewer shows %q, the file holds %q", got, want)
	}
	if phone {
		if !eval[bool](b, `(() => { const r = document.getElementById('file-viewer').getBoundingClientRect();
			return r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight; })()`) {
			t.Fatal("the viewer does not fit the screen")
		}
	}
	shoot("viewer")
	b.do("close the viewer", chromedp.Click(chromedp.ID("viewer-close")), chromedp.WaitNotVisible(chromedp.ID("file-viewer")))

	// Files dropped onto a directory go into it; onto the tree, to the root.
	html := "<b>not bold</b>\n"
	b.drop(`#files-tree .node[data-path="docs"] > .node-name`, map[string][]byte{"dropped.html": []byte(html)})
	b.until("the upload", `document.getElementById('files-status').textContent === 'Uploaded docs/dropped.html.'`)
	bin := []byte{0, 1, 2, 0xff, 'x'}
	b.drop(`#files-tree`, map[string][]byte{"blob.bin": bin})
	b.untilJSON("the tree", treeJS, `["file blob.bin","dir docs","file docs/dropped.html","file docs/notes.md"]`)
	if got := readFile(t, s, id, "docs/dropped.html"); got != html {
		t.Fatalf("the dropped file holds %q, want %q", got, html)
	}
	if got := readFile(t, s, id, "blob.bin"); got != string(bin) {
		t.Fatalf("the dropped binary holds %q, want %q", got, bin)
	}
	// The workspace's text is the agent's (or anyone's): never markup.
	b.do("open the dropped file", chromedp.Click(chromedp.CSS(`#files-tree .node[data-path="docs/dropped.html"] > .node-name`)))
	b.until("the viewer shows text", `document.getElementById('file-viewer').dataset.state === 'text'`)
	if got := eval[string](b, `document.querySelector('#viewer-body pre').textContent`); got != html || eval[bool](b, `document.querySelector('#viewer-body b') !== null`) {
		t.Fatalf("the viewer shows %q as markup", got)
	}
	b.do("close the viewer", chromedp.Click(chromedp.ID("viewer-close")), chromedp.WaitNotVisible(chromedp.ID("file-viewer")))
	b.do("open the binary file", chromedp.Click(chromedp.CSS(`#files-tree .node[data-path="blob.bin"] > .node-name`)))
	b.until("the viewer says it is binary", `document.getElementById('file-viewer').dataset.state === 'binary'`)
	if got := eval[string](b, `document.getElementById('viewer-body').textContent`); !strings.Contains(got, "binary file") || !strings.Contains(got, "5 B") {
		t.Fatalf("the viewer says %q of a 5-byte binary file", got)
	}
	b.do("close the viewer", chromedp.Click(chromedp.ID("viewer-close")), chromedp.WaitNotVisible(chromedp.ID("file-viewer")))
	shoot("tree")

	// The whole workspace as .tar.gz: the answer is a gzip holding the files.
	b.do("download the workspace", chromedp.Click(chromedp.ID("files-archive")))
	b.until("the archive is saved", `window.savedBlobs.length === 1`)
	type saved struct {
		Type  string
		Head  []int
		Names []string
	}
	archive := evalAwait[saved](b, `(async () => {
		const blob = window.savedBlobs[0];
		const head = [...new Uint8Array(await blob.slice(0, 2).arrayBuffer())];
		const tar = await new Response(blob.stream().pipeThrough(new DecompressionStream('gzip'))).text();
		return { type: blob.type, head, names: ['blob.bin', 'docs/dropped.html', 'docs/notes.md'].filter(n => tar.includes(n)) };
	})()`)
	if archive.Type != "application/gzip" || fmt.Sprint(archive.Head) != "[31 139]" || len(archive.Names) != 3 {
		t.Fatalf("the archive: type %q, first bytes %v, holds %v", archive.Type, archive.Head, archive.Names)
	}
	b.untilJSON("the pane says so", `document.getElementById('files-status').textContent.startsWith('Downloaded ' + `+jsString(id+".tar.gz")+`)`, `true`)
	// One file, with its own button.
	b.do("download a file", chromedp.Click(chromedp.CSS(`#files-tree .node[data-path="blob.bin"] > .node-download`)))
	b.until("the file is saved", `window.savedBlobs.length === 2`)
	if got := evalAwait[[]int](b, `window.savedBlobs[1].arrayBuffer().then(b => [...new Uint8Array(b)])`); fmt.Sprint(got) != fmt.Sprint([]int{0, 1, 2, 0xff, 'x'}) {
		t.Fatalf("the downloaded file holds %v, want %v", got, bin)
	}

	// No revert while a turn runs.
	if phone {
		b.showFiles(false)
	}
	b.prompt("hang")
	b.until("the turn runs", turnStatus("running"))
	b.until("Revert waits for the turn", `[...document.querySelectorAll('.changes-revert')].every(b => b.disabled)`)
	b.do("cancel the turn", chromedp.WaitEnabled(chromedp.ID("cancel-turn")), chromedp.Click(chromedp.ID("cancel-turn")))
	b.until("the turn is canceled", turnStatus("canceled"))
	revert := chromedp.CSS(`#transcript .turn[data-turn-id="` + writeTurn + `"] .changes-revert`)
	b.do("Revert is back", chromedp.WaitEnabled(revert))

	// Revert asks first; keeping the files keeps them.
	b.do("revert", chromedp.ScrollIntoView(revert), chromedp.Click(revert), chromedp.WaitVisible(chromedp.ID("confirm-revert")))
	if got := eval[string](b, `document.getElementById('revert-text').textContent`); !strings.Contains(got, "what the turn after it changed") {
		t.Fatalf("the confirmation says %q; it does not say the later turn's work goes too", got)
	}
	shoot("confirm")
	b.do("keep the files", chromedp.Click(chromedp.CSS(`#confirm-revert button[value="keep"]`)), chromedp.WaitNotVisible(chromedp.ID("confirm-revert")))
	b.do("revert", chromedp.Click(revert), chromedp.WaitVisible(chromedp.ID("confirm-revert")))
	if page, err := s.Client.Events(ctx, id, 0, 1000); err != nil {
		t.Fatal(err)
	} else if slices.ContainsFunc(page.Events, func(e sandbox.Event) bool { return e.Type == sandbox.TypeWorkspaceReverted }) {
		t.Fatal("the workspace was reverted although the user kept the files")
	}
	b.do("confirm", chromedp.Click(chromedp.CSS(`#confirm-revert button[value="revert"]`)), chromedp.WaitNotVisible(chromedp.ID("confirm-revert")))

	// The revert shows in the transcript, after the last turn, and the
	// workspace is as it was before the write.
	revertedJS := `[...document.querySelectorAll('#transcript > *')].map(e => e.classList.contains('reverted') ? 'reverted ' + e.dataset.turnId + ' ' + e.querySelector('.reverted-what').textContent : 'turn')`
	wantReverted := fmt.Sprintf(`["turn","turn","reverted %s as it was before “write docs/notes.md”"]`, writeTurn)
	b.untilJSON("the revert's line", revertedJS, wantReverted)
	b.until("the turn says it was reverted", turn+`.querySelector('.status-reverted').checkVisibility()`)
	var left []string
	for e, err := range s.Client.AllFiles(ctx, id, "") {
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, e.Type+" "+e.Path)
	}
	for _, gone := range []string{"dir docs", "file blob.bin"} {
		if slices.Contains(left, gone) {
			t.Fatalf("after the revert the workspace still holds %s: %v", gone, left)
		}
	}
	b.showFiles(true)
	want, err := json.Marshal(append([]string{}, left...))
	if err != nil {
		t.Fatal(err)
	}
	b.untilJSON("the tree follows the revert", treeJS, string(want))
	shoot("reverted")

	// A reload still shows it: the page reads it from the log.
	b.do("reload", chromedp.Reload())
	b.waitLive()
	b.untilJSON("the revert's line after a reload", `[...document.querySelectorAll('#transcript > *')].map(e => e.className)`, `["turn","reverted"]`)
	b.noConsoleErrors()
}
