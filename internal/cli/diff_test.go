package cli

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// runTurn runs a turn of the demo agent to its end, approving what it
// asks, and returns its completion.
func runTurn(t *testing.T, srv *sparklestest.Server, id, text string) (string, *sandbox.TurnCompleted) {
	t.Helper()
	ctx := testCtx(t)
	c := srv.Client
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.StartTurn(ctx, id, text)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stream(ctx, id, client.StreamOptions{Since: client.Since(uint64(sb.LastEventID))})
	defer s.Close()
	for {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != client.KindEvent || m.Event.TurnID != turn.ID {
			continue
		}
		switch d := m.Event.Data.(type) {
		case *sandbox.ApprovalRequested:
			if _, err := c.Decide(ctx, id, d.ApprovalID, client.Approve); err != nil {
				t.Fatal(err)
			}
		case *sandbox.TurnCompleted:
			return turn.ID, d
		}
	}
}

func TestDiffCommand(t *testing.T) {
	srv, id := startSandbox(t)
	if _, err := runCLI(t, srv.URL, "", "diff", id); err == nil || !strings.Contains(err.Error(), "no finished turn") {
		t.Fatalf("diff before any turn: %v, want no finished turn", err)
	}
	first, done := runTurn(t, srv, id, "write notes.txt")
	if done.Changes == nil || done.Changes.Added != 1 {
		t.Fatalf("changes = %+v", done.Changes)
	}
	second, _ := runTurn(t, srv, id, "hello")
	want, err := srv.Client.Diff(testCtx(t), id, first)
	if err != nil || !strings.Contains(want, "+++ b/notes.txt") {
		t.Fatalf("diff of %s = %q, %v", first, want, err)
	}

	// Through a pipe: the server's diff byte for byte.
	r := mustRun(t, srv.URL, "diff", id, first)
	if r.out != want {
		t.Fatalf("stdout = %q, want %q", r.out, want)
	}
	// The default is the last finished turn, which changed nothing, found
	// however many events came after it.
	var noise []*sandbox.Event
	for range 1500 {
		noise = append(noise, &sandbox.Event{Type: sandbox.TypeSandboxError, Data: &sandbox.SandboxError{Code: sandbox.ErrInternal, Message: "noise"}})
	}
	srv.AppendEvents(id, noise...)
	r = mustRun(t, srv.URL, "diff", id)
	if r.out != "" || !strings.Contains(r.err, "turn "+second+" changed no file") {
		t.Fatalf("diff of the last turn: %+v", r)
	}
	// The sandbox may come from --sandbox, or be the newest; the turn
	// may come first.
	r = mustRun(t, srv.URL, "diff", first, "--sandbox", id)
	if r.out != want {
		t.Fatalf("diff --sandbox: %q", r.out)
	}
	t.Setenv("SPARKLES_SANDBOX", "")
	r = mustRun(t, srv.URL, "diff", first)
	if r.out != want || !strings.Contains(r.err, "sandbox "+id+" (the newest") {
		t.Fatalf("diff of the newest sandbox: %+v", r)
	}

	if _, err := runCLI(t, srv.URL, "", "diff", id, "bogus"); err == nil || !strings.Contains(err.Error(), "neither a sandbox id") {
		t.Fatalf("diff with a bad argument: %v", err)
	}
	if _, err := runCLI(t, srv.URL, "", "diff", id, "turn_00000000000000000000000000"); err == nil {
		t.Fatal("diff of an unknown turn succeeded")
	}
}

func TestRevertCommand(t *testing.T) {
	srv, id := startSandbox(t)
	turn, _ := runTurn(t, srv, id, "write notes.txt")
	if got := remoteTree(t, srv.Client, id, ""); got["notes.txt"] == "" {
		t.Fatalf("the turn wrote no notes.txt: %v", got)
	}
	r := mustRun(t, srv.URL, "revert", id, turn)
	if got, want := r.out, "reverted "+id+": the workspace is as it was when turn "+turn+" started\n"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	if got := remoteTree(t, srv.Client, id, ""); len(got) != 0 {
		t.Fatalf("workspace after the revert: %v, want empty", got)
	}
	if _, err := runCLI(t, srv.URL, "", "revert", id); err == nil || !strings.Contains(err.Error(), "TURN_ID") {
		t.Fatalf("revert without a turn: %v", err)
	}
}

func TestWriteDiff(t *testing.T) {
	const diff = "diff --git a/x.go b/x.go\n" +
		"index 0000001..0000002 100644\n" +
		"--- a/x.go\n" +
		"+++ b/x.go\n" +
		"@@ -1,3 +1,3 @@ func main() {\n" +
		" same\n" +
		"--- a removed line that looks like a header\n" +
		"+added \x1b]0;title\x07line\n" +
		"\\ No newline at end of file\n" +
		"diff --git a/img.png b/img.png\n" +
		"Binary files a/img.png and b/img.png differ\n"
	t.Run("Plain", func(t *testing.T) {
		var b bytes.Buffer
		if err := writeDiff(&b, diff, false); err != nil {
			t.Fatal(err)
		}
		if b.String() != diff {
			t.Fatalf("plain diff = %q, want it unchanged", b.String())
		}
		if colorOut(&b) {
			t.Fatal("a buffer takes colours")
		}
	})
	t.Run("Color", func(t *testing.T) {
		var b bytes.Buffer
		if err := writeDiff(&b, diff, true); err != nil {
			t.Fatal(err)
		}
		const bold, red, green, cyan, off = "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[0m"
		want := bold + "diff --git a/x.go b/x.go" + off + "\n" +
			bold + "index 0000001..0000002 100644" + off + "\n" +
			bold + "--- a/x.go" + off + "\n" +
			bold + "+++ b/x.go" + off + "\n" +
			cyan + "@@ -1,3 +1,3 @@" + off + " func main() {\n" +
			" same\n" +
			red + "--- a removed line that looks like a header" + off + "\n" +
			green + "+added ]0;titleline" + off + "\n" +
			"\\ No newline at end of file\n" +
			bold + "diff --git a/img.png b/img.png" + off + "\n" +
			"Binary files a/img.png and b/img.png differ\n"
		if got := b.String(); got != want {
			t.Fatalf("coloured diff:\n got %q\nwant %q", got, want)
		}
	})
}

func TestChangesLine(t *testing.T) {
	plain := func(_, s string) string { return s }
	files := func(changes ...string) []sandbox.FileChange {
		var out []sandbox.FileChange
		for i, c := range changes {
			out = append(out, sandbox.FileChange{Path: string(rune('a'+i)) + ".txt", Change: c})
		}
		return out
	}
	const add, mod, del = sandbox.ChangeAdded, sandbox.ChangeModified, sandbox.ChangeDeleted
	for _, tt := range []struct {
		name string
		ch   *sandbox.Changes
		want string
	}{
		{"Nil", nil, ""},
		{"None", &sandbox.Changes{}, ""},
		{"One", &sandbox.Changes{Added: 1, Files: files(add)}, "1 file changed: + a.txt"},
		{"Two", &sandbox.Changes{Added: 1, Modified: 1, Files: files(add, mod)}, "2 files changed: + a.txt, ~ b.txt"},
		{"More", &sandbox.Changes{Added: 2, Modified: 2, Deleted: 3, Files: files(add, add, mod, mod, del, del, del)},
			"7 files changed: + a.txt, + b.txt, ~ c.txt, ~ d.txt, - e.txt, …and 2 more"},
		{"Truncated", &sandbox.Changes{Added: 1500, Files: files(add), Truncated: true}, "1500 files changed: + a.txt, …and 1499 more"},
		{"Hostile", &sandbox.Changes{Deleted: 1, Files: []sandbox.FileChange{{Path: "x\x1b[2J.txt", Change: del}}}, "1 file changed: - x[2J.txt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := changesLine(tt.ch, plain); got != tt.want {
				t.Fatalf("changesLine = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTurnSummaryChanges checks that a terminal's closing summary, and a
// pipe's stderr, name what the turn changed.
func TestTurnSummaryChanges(t *testing.T) {
	done := &sandbox.TurnCompleted{Status: sandbox.TurnSucceeded, DurationMS: 1200,
		Changes: &sandbox.Changes{Added: 1, Modified: 1, Files: []sandbox.FileChange{
			{Path: "notes.txt", Change: sandbox.ChangeAdded}, {Path: "main.go", Change: sandbox.ChangeModified}}}}
	var out bytes.Buffer
	r := newRenderer(&out, &out, false)
	r.tty, r.fd = true, -1
	r.turnSummary(done, 0, "sparkles prompt --sandbox c_1 \"…\"")
	want := "✓ succeeded in 1.2s\n  2 files changed: + notes.txt, ~ main.go\n  continue: sparkles prompt --sandbox c_1 \"…\"\n"
	if got := out.String(); got != want {
		t.Fatalf("summary = %q, want %q", got, want)
	}

	var stdout, stderr bytes.Buffer
	p := &promptRun{turn: sandbox.Turn{ID: "turn_1"}, r: newRenderer(&stdout, &stderr, false), errw: &stderr}
	ended, err := p.handle(client.Message{Kind: client.KindEvent, Event: sandbox.Event{TurnID: "turn_1", Data: done}})
	if !ended || err != nil {
		t.Fatalf("handle = %v, %v", ended, err)
	}
	if got, want := stderr.String(), "2 files changed: + notes.txt, ~ main.go\n"; got != want {
		t.Fatalf("pipe stderr = %q, want %q", got, want)
	}
	if stdout.Len() != 0 {
		t.Fatalf("pipe stdout = %q, want nothing", stdout.String())
	}
}

// TestEventsSummaryWorkspace: sparkles events tells a turn's changes and
// a revert in its one-line gists.
func TestEventsSummaryWorkspace(t *testing.T) {
	done := sandbox.Event{Type: sandbox.TypeTurnCompleted, Data: &sandbox.TurnCompleted{Status: "succeeded", StopReason: "end_turn",
		Changes: &sandbox.Changes{Added: 1, Files: []sandbox.FileChange{{Path: "notes.txt", Change: sandbox.ChangeAdded}}}}}
	if got := summary(done, 200); !strings.HasSuffix(got, " · 1 file changed: + notes.txt") {
		t.Fatalf("turn.completed gist %q", got)
	}
	rev := sandbox.Event{Type: sandbox.TypeWorkspaceReverted, Data: &sandbox.WorkspaceReverted{TurnID: "turn_1"}}
	if got, want := summary(rev, 200), "the workspace is as it was when turn_1 started"; got != want {
		t.Fatalf("workspace.reverted gist %q, want %q", got, want)
	}
}

// TestEventsSummaryPlan: a plan's gist says how much is done and each
// entry with its mark, cut to the width.
func TestEventsSummaryPlan(t *testing.T) {
	plan := sandbox.Event{Type: sandbox.TypePlanUpdated, Data: &sandbox.PlanUpdated{Entries: []sandbox.PlanEntry{
		{Content: "Read a.go", Status: sandbox.PlanCompleted}, {Content: "Fix the bug", Status: sandbox.PlanInProgress}, {Content: "Run tests", Status: sandbox.PlanPending}}}}
	if got, want := summary(plan, 200), "[plan] 1 of 3 done: ✓ Read a.go · ◐ Fix the bug · ○ Run tests"; got != want {
		t.Fatalf("plan.updated gist %q, want %q", got, want)
	}
	if got := summary(plan, 20); utf8.RuneCountInString(got) > 20 {
		t.Fatalf("plan.updated gist %q is wider than 20", got)
	}
	if got, want := summary(sandbox.Event{Type: sandbox.TypePlanUpdated, Data: &sandbox.PlanUpdated{}}, 200), "[plan] empty"; got != want {
		t.Fatalf("empty plan gist %q, want %q", got, want)
	}
}
