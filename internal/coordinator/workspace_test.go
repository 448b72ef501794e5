package coordinator_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// writeTurn runs the demo agent's "write <name>" turn, approving the
// write, and returns the turn's events.
func (e *env) writeTurn(sb sandbox.Sandbox, name string) (string, []sandbox.Event) {
	e.t.Helper()
	ctx := context.Background()
	turn, err := e.co.StartTurn(ctx, sb.ID, "write "+name)
	if err != nil {
		e.t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, func(ev sandbox.Event) bool {
		return ev.TurnID == turn.ID && ev.Type == sandbox.TypeApprovalRequested
	})
	a := approvalOf(evs[len(evs)-1:])
	if _, err := e.co.Decide(ctx, sb.ID, a.ApprovalID, sandbox.Decision{Decision: "approve"}); err != nil {
		e.t.Fatal(err)
	}
	var out []sandbox.Event
	for _, ev := range e.waitFor(sb.ID, 0, turnCompleted(turn.ID)) {
		if ev.TurnID == turn.ID {
			out = append(out, ev)
		}
	}
	return turn.ID, out
}

// TestTurnChanges: a turn's turn.completed lists what it changed in the
// workspace, its diff shows it, and a revert puts the workspace back as
// the turn found it and says so in the log.
func TestTurnChanges(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	e.waitStatus(sb.ID, sandbox.StatusReady)

	// A file given before the turn, through the workspace.
	f, err := e.co.Files(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, created, err := f.WriteFile("README.md", strings.NewReader("# hello\n"), sandbox.WriteFileOptions{}); err != nil || !created {
		t.Fatalf("WriteFile = %v, %v", created, err)
	}
	f.Close()

	turnID, evs := e.writeTurn(sb, "notes.txt")
	c := completed(evs)
	if c == nil || c.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn.completed = %+v; events %s", c, types(evs))
	}
	want := sandbox.Changes{Added: 1, Files: []sandbox.FileChange{{Path: "notes.txt", Change: sandbox.ChangeAdded}}}
	if c.Changes == nil || c.Changes.Added != want.Added || c.Changes.Modified != 0 || c.Changes.Deleted != 0 ||
		len(c.Changes.Files) != 1 || c.Changes.Files[0] != want.Files[0] || c.Changes.Truncated {
		t.Fatalf("changes = %+v, want %+v", c.Changes, want)
	}

	var diff bytes.Buffer
	if err := e.co.Diff(ctx, sb.ID, turnID, &diff); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"diff --git a/notes.txt b/notes.txt", "+++ b/notes.txt", "+Written by the Sparkles demo agent.", "+Prompt: write notes.txt"} {
		if !strings.Contains(diff.String(), line+"\n") {
			t.Fatalf("diff lacks %q:\n%s", line, diff.String())
		}
	}
	if strings.Contains(diff.String(), "README.md") {
		t.Fatalf("diff shows a file the turn did not change:\n%s", diff.String())
	}

	t.Run("Errors", func(t *testing.T) {
		if err := e.co.Diff(ctx, sb.ID, "turn_nope", &diff); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("diff of an unknown turn: %v, want not_found", err)
		}
		if _, err := e.co.Revert(ctx, sb.ID, "turn_nope"); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("revert to an unknown turn: %v, want not_found", err)
		}
	})

	t.Run("Revert", func(t *testing.T) {
		work := datadir.Dir(e.dir).Sandbox(sb.ID).Work()
		last := evs[len(evs)-1].ID
		got, err := e.co.Revert(ctx, sb.ID, turnID)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(got.LastEventID) <= last {
			t.Fatalf("revert answered last_event_id %d, want past %d", got.LastEventID, last)
		}
		if _, err := os.Stat(filepath.Join(work, "notes.txt")); !os.IsNotExist(err) {
			t.Fatalf("notes.txt after the revert: %v, want gone", err)
		}
		if b, err := os.ReadFile(filepath.Join(work, "README.md")); err != nil || string(b) != "# hello\n" {
			t.Fatalf("README.md after the revert = %q, %v", b, err)
		}
		rev := e.waitFor(sb.ID, last, isType(sandbox.TypeWorkspaceReverted))
		ev := rev[len(rev)-1]
		if d, ok := ev.Data.(*sandbox.WorkspaceReverted); !ok || d.TurnID != turnID || ev.TurnID != "" {
			t.Fatalf("workspace.reverted = %+v (turn_id %q)", ev.Data, ev.TurnID)
		}
	})
}

// TestRevertWhileTurnRuns: a revert and a diff wait for the running turn.
func TestRevertWhileTurnRuns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	sb := e.create(sandbox.CreateParams{})
	e.waitStatus(sb.ID, sandbox.StatusReady)
	first, _ := e.writeTurn(sb, "a.txt")

	// The write turn waits on its approval: it runs until decided.
	turn, err := e.co.StartTurn(ctx, sb.ID, "write b.txt")
	if err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(sb.ID, 0, func(ev sandbox.Event) bool {
		return ev.TurnID == turn.ID && ev.Type == sandbox.TypeApprovalRequested
	})
	if _, err := e.co.Revert(ctx, sb.ID, first); !sandbox.IsType(err, sandbox.ETurnInProgress) {
		t.Fatalf("revert while a turn runs: %v, want turn_in_progress", err)
	}
	var diff bytes.Buffer
	if err := e.co.Diff(ctx, sb.ID, turn.ID, &diff); !sandbox.IsType(err, sandbox.ETurnInProgress) {
		t.Fatalf("diff of a running turn: %v, want turn_in_progress", err)
	}
	if _, err := e.co.CancelTurn(ctx, sb.ID, turn.ID); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, evs[len(evs)-1].ID, turnCompleted(turn.ID))
	if _, err := e.co.Revert(ctx, sb.ID, first); err != nil {
		t.Fatalf("revert after the turn: %v", err)
	}
}
