package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

func TestSandboxName(t *testing.T) {
	for _, tt := range []struct{ prompt, want string }{
		{"write notes.txt", "write-notes-txt"},
		{"hello", "hello"},
		{"Please, can you fix the bug in main.go now?", "fix-bug-in"},
		{"Refactorisation-générale of everything", "refactorisat-générale-of"},
		{"  …!! ", "prompt"},
	} {
		got := sandboxName(tt.prompt)
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(tt.want) + `-[0-9a-f]{4}$`).MatchString(got) {
			t.Errorf("sandboxName(%q) = %q, want %s-XXXX", tt.prompt, got, tt.want)
		}
	}
}

// TestPromptSandbox: a one-shot prompt names its sandbox after the prompt,
// says how to continue or delete it, and with --rm deletes it.
func TestPromptSandbox(t *testing.T) {
	srv := sparklestest.Start(t)
	ctx := testCtx(t)
	created := func(stderr string) sandbox.Sandbox {
		t.Helper()
		m := regexp.MustCompile(`(?m)^sandbox (c_\w+)$`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("stderr names no new sandbox:\n%s", stderr)
		}
		sb, err := srv.Client.GetSandbox(ctx, m[1])
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}

	t.Run("Keep", func(t *testing.T) {
		r := mustRun(t, srv.URL, "prompt", "--approve-all", "write notes.txt")
		sb := created(r.err)
		if !regexp.MustCompile(`^write-notes-txt-[0-9a-f]{4}$`).MatchString(sb.Metadata["name"]) {
			t.Fatalf("metadata name %q", sb.Metadata["name"])
		}
		lines := strings.Split(strings.TrimSpace(r.err), "\n")
		want := "sparkles: continue: sparkles prompt --sandbox " + sb.ID + ` --url ` + srv.URL + ` "…" · delete: sparkles sandbox delete ` + sb.ID + " --url " + srv.URL
		if last := lines[len(lines)-1]; last != want {
			t.Fatalf("last line of stderr:\n%s\nwant:\n%s", last, want)
		}
		if sb.Status == sandbox.StatusDeleted {
			t.Fatal("deleted without --rm")
		}
		list := mustRun(t, srv.URL, "sandbox", "list")
		if !regexp.MustCompile(`(?m)^ID +NAME +STATUS`).MatchString(list.out) ||
			!regexp.MustCompile(`(?m)^`+sb.ID+` +`+sb.Metadata["name"]+` +ready `).MatchString(list.out) {
			t.Fatalf("sandbox list shows no name column with %q:\n%s", sb.Metadata["name"], list.out)
		}
	})
	t.Run("Named", func(t *testing.T) {
		// A sandbox named otherwise keeps its name; one without shows the
		// tail of its id.
		sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"name": "my\tbig\x1b[2J job"}})
		if err != nil {
			t.Fatal(err)
		}
		bare, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, srv.URL, "prompt", "--approve-all", "--sandbox", sb.ID, "hello")
		if strings.Contains(r.err, "delete") {
			t.Fatalf("a sandbox it did not create offered for deletion:\n%s", r.err)
		}
		list := mustRun(t, srv.URL, "sandbox", "list")
		if !strings.Contains(list.out, sb.ID+"  my big[2J job  ") || !strings.Contains(list.out, bare.ID+"  "+bare.ID[len(bare.ID)-6:]+"  ") {
			t.Fatalf("sandbox list:\n%s", list.out)
		}
	})
	t.Run("Remove", func(t *testing.T) {
		r := mustRun(t, srv.URL, "prompt", "--rm", "--approve-all", "write notes.txt")
		sb := created(r.err)
		if sb.Status != sandbox.StatusDeleted {
			t.Fatalf("status %s after --rm, want deleted", sb.Status)
		}
		if !strings.HasSuffix(r.err, "\nsandbox "+sb.ID+" deleted\n") || strings.Contains(r.err, "continue:") {
			t.Fatalf("stderr:\n%s", r.err)
		}
	})
	t.Run("RemoveFailed", func(t *testing.T) {
		// A turn that fails takes its sandbox with it too.
		r, err := runCLI(t, srv.URL, "", "prompt", "--rm", "crash")
		if code, _ := exitStatus(err); code != int(exitTurnFailed) {
			t.Fatalf("exit %d (%v), want %d", code, err, exitTurnFailed)
		}
		if sb := created(r.err); sb.Status != sandbox.StatusDeleted {
			t.Fatalf("status %s after --rm, want deleted", sb.Status)
		}
	})
	t.Run("RemoveNamed", func(t *testing.T) {
		_, err := runCLI(t, srv.URL, "", "prompt", "--rm", "--sandbox", "c_1", "hello")
		code, print := exitStatus(err)
		want := "--rm deletes only the sandbox this command creates, not one named with --sandbox; delete that one with: sparkles sandbox delete c_1"
		if code != exitUsage || !print || err.Error() != want {
			t.Fatalf("exit %d, error %v; want exit %d and %q", code, err, exitUsage, want)
		}
	})
}
