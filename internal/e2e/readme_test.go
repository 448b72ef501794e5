package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docBlocks returns the ```sh blocks of the section of a Markdown page
// that starts with the heading (a whole line, such as "# Title"), in
// order. The section ends at the next heading of its level or above; a
// line inside a code block is never a heading (a shell comment is not).
func docBlocks(t *testing.T, page, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(repoFile(page))
	if err != nil {
		t.Fatal(err)
	}
	level := headingLevel(heading)
	var (
		blocks  []string
		block   strings.Builder
		section bool   // inside the heading's section
		fence   string // the info string of the open code block, "" outside one
		inBlock bool
	)
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if inBlock {
			if line == "```" {
				if section && fence == "sh" {
					blocks = append(blocks, block.String())
				}
				inBlock, fence = false, ""
				block.Reset()
				continue
			}
			block.WriteString(line + "\n")
			continue
		}
		if info, ok := strings.CutPrefix(line, "```"); ok {
			inBlock, fence = true, info
			continue
		}
		if l := headingLevel(line); l > 0 {
			if section && l <= level {
				break
			}
			if line == heading {
				section = true
			}
		}
	}
	if inBlock && section {
		t.Fatalf("%s: a block of %q does not end", page, heading)
	}
	if !section {
		t.Fatalf("%s has no section %q", page, heading)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: section %q has no sh block", page, heading)
	}
	return blocks
}

// headingLevel is the level of a Markdown ATX heading line, 0 for any
// other line.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || n > 6 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

// walkThroughShims run around the docs' commands, which are not
// changed. curl fails on an HTTP error status, as a person reading its
// answer would notice, and says so in the failures file. A stream, which
// a page runs in the background, becomes that job's process (so that
// kill ends it) and writes its frames to a file of its own for the test
// to read. kill first waits, with a deadline, until the stream has shown
// every event the log held when it was called: a person stops following
// once the stream has caught up.
const walkThroughShims = `
set -e
curl() {
	case " $* " in
	*" -N "*|*" -sN "*)
		case "$*" in *Last-Event-ID*) : >"$STREAMS/$BASHPID.cursor" ;; esac
		exec curl --fail-with-body -o "$STREAMS/$BASHPID.sse" "$@" ;;
	esac
	command curl --fail-with-body "$@" || { s=$?; echo "curl $* failed with status $s" >>"$STREAMS/failures"; return $s; }
}
caught_up() {
	last=$(command curl -s -H "Authorization: Bearer $TOKEN" "$API/sandboxes/$ID" | grep -o '"last_event_id":"[0-9]*"' | cut -d'"' -f4)
	f="$STREAMS/$1.sse"
	for i in $(seq 400); do
		if grep -qx "id: $last" "$f" 2>/dev/null; then return 0; fi
		# Without a cursor the stream starts at its snapshot's last_event_id.
		snap=$(grep -o '"last_event_id":"[0-9]*"' "$f" 2>/dev/null | head -n 1 | cut -d'"' -f4)
		if [ ! -e "$STREAMS/$1.cursor" ] && [ -n "$snap" ] && [ "$snap" -ge "$last" ]; then return 0; fi
		sleep 0.05
	done
	echo "stream $1 did not show event $last within 20s" >>"$STREAMS/failures"
}
kill() {
	for pid in "$@"; do caught_up "$pid"; done
	builtin kill "$@"
	wait "$@" 2>/dev/null || true
}
`

// TestDocsWalkThrough pastes the curl walk-through of docs/walkthrough.md,
// block after block, into bash against a real sparkles serve on a data dir
// and a loopback port of its own, with the token file where the page reads
// it. It fails when a command fails.
func TestDocsWalkThrough(t *testing.T) {
	out, streams := runDocSection(t, "docs/walkthrough.md", "# A walk-through with curl")

	m := regexp.MustCompile(`approval (appr_\w+), last event read (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the walk-through found no approval:\n%s", out)
	}
	last, _ := strconv.ParseUint(m[2], 10, 64)
	if !strings.Contains(out, `"id":"`+m[1]+`","object":"approval"`) {
		t.Fatalf("the approve step did not answer the approval:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(streams, "*.sse"))
	if len(files) != 2 {
		t.Fatalf("%d streams were opened, want 2: %v\n%s", len(files), files, out)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if !bytes.HasPrefix(b, []byte("event: snapshot\n")) {
			t.Fatalf("%s does not start with a snapshot:\n%s", f, b)
		}
		resumed := strings.HasSuffix(f, ".sse") && fileExists(strings.TrimSuffix(f, ".sse")+".cursor")
		if !resumed {
			continue
		}
		// The resumed stream replays what came after the cursor, only.
		ids := regexp.MustCompile(`(?m)^id: (\d+)$`).FindAllStringSubmatch(string(b), -1)
		if len(ids) == 0 || !strings.Contains(string(b), "event: approval.resolved\n") {
			t.Fatalf("the resumed stream replayed nothing of the approval:\n%s", b)
		}
		for _, id := range ids {
			if n, _ := strconv.ParseUint(id[1], 10, 64); n <= last {
				t.Fatalf("the resumed stream repeated event %d, at or before its cursor %d:\n%s", n, last, b)
			}
		}
	}
}

// runDocSection runs the sh blocks of a section of a docs page, as they
// stand and in order, in bash with walkThroughShims, against a real
// `sparkles serve` on its embedded defaults (HOME a temporary one). It
// answers what they printed and the directory of their streams.
func runDocSection(t *testing.T, page, heading string) (out, streams string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed; the docs' walk-throughs need it")
		}
		t.Skip("curl is not installed")
	}
	home := t.TempDir()
	dataDir := filepath.Join(home, ".local", "share", "sparkles")
	env := append(cliEnv(t), "HOME="+home)
	p := startServe(t, env, dataDir, "")
	p.waitServing()

	streams = t.TempDir()
	script := walkThroughShims + strings.Join(docBlocks(t, page, heading), "\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(env, "SPARKLES_URL="+p.url, "STREAMS="+streams)
	cmd.Dir = t.TempDir()
	// Its own process group, so that nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	failures, _ := os.ReadFile(filepath.Join(streams, "failures"))
	if err != nil || len(failures) > 0 {
		t.Fatalf("%s, %q failed (%v):\n%s\noutput:\n%s\nserver log:\n%s", page, heading, err, failures, buf.String(), p.logTail())
	}
	return buf.String(), streams
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestDocsWorkspace runs the workspace section of docs/workspace.md as it
// stands: an upload, a turn that writes a file, its changes and diff, the
// work taken out, and a revert.
func TestDocsWorkspace(t *testing.T) {
	o, _ := runDocSection(t, "docs/workspace.md", "# The workspace: a codebase in, the work out")
	for _, want := range []string{
		`"changes":{"added":1,"modified":0,"deleted":0,"files":[{"path":"notes.txt","change":"added"}]`,
		"+++ b/notes.txt\n", "+Written by the Sparkles demo agent.\n", // the diff
		"Prompt: please write notes.txt\n", // the file taken out
		"notes.txt\nsrc/\nsrc/main.go\n",   // the archive
	} {
		if !strings.Contains(o, want) {
			t.Fatalf("the output lacks %q:\n%s", want, o)
		}
	}
	i := strings.LastIndex(o, `"object":"sandbox"`)
	if i < 0 {
		t.Fatalf("the revert answered no sandbox:\n%s", o)
	}
	if after := o[i:]; strings.Contains(after, "notes.txt") || !strings.Contains(after, `"path":"docs"`) || !strings.Contains(after, `"path":"src"`) {
		t.Fatalf("after the revert the workspace lists:\n%s", after)
	}
}
