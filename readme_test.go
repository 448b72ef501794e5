package main

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

// readmeBlocks returns the ```sh blocks of the README section that starts
// with the heading, in order.
func readmeBlocks(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	section := readme[start+len(heading)+2:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var blocks []string
	for {
		i := strings.Index(section, "```sh\n")
		if i < 0 {
			break
		}
		section = section[i+len("```sh\n"):]
		j := strings.Index(section, "```\n")
		if j < 0 {
			t.Fatalf("README.md: a block of %q does not end", heading)
		}
		blocks = append(blocks, section[:j])
		section = section[j:]
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md: section %q has no sh block", heading)
	}
	return blocks
}

// walkThroughShims run around the README's commands, which are not
// changed. curl fails on an HTTP error status, as a person reading its
// answer would notice, and says so in the failures file. A stream, which
// the README runs in the background, becomes that job's process (so that
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

// TestREADMEWalkThrough pastes the README's curl walk-through, block after
// block, into bash against a real sparkles serve on a data dir and a
// loopback port of its own, with the token file where the README reads
// it. It fails when a command fails.
func TestREADMEWalkThrough(t *testing.T) {
	out, streams := runREADMESection(t, "## A walk-through with curl")

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

// runREADMESection runs the sh blocks of a README section, as they
// stand and in order, in bash with walkThroughShims, against a real
// `sparkles serve` on its embedded defaults (HOME a temporary one). It
// answers what they printed and the directory of their streams.
func runREADMESection(t *testing.T, heading string) (out, streams string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed; the README's walk-throughs need it")
		}
		t.Skip("curl is not installed")
	}
	home := t.TempDir()
	dataDir := filepath.Join(home, ".local", "share", "sparkles")
	env := append(cliEnv(t), "HOME="+home)
	p := startServe(t, env, dataDir, "")
	p.waitServing()

	streams = t.TempDir()
	script := walkThroughShims + strings.Join(readmeBlocks(t, heading), "\n")
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
		t.Fatalf("the README's %q failed (%v):\n%s\noutput:\n%s\nserver log:\n%s", heading, err, failures, buf.String(), p.logTail())
	}
	return buf.String(), streams
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestREADMEWorkspace runs the README's workspace section as it stands:
// an upload, a turn that writes a file, its changes and diff, the work
// taken out, and a revert.
func TestREADMEWorkspace(t *testing.T) {
	o, _ := runREADMESection(t, "## The workspace: a codebase in, the work out")
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
