package coordinator_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/gittest"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// newSourceEnv is newEnv with the server log, at every level, in log.
func newSourceEnv(t *testing.T, log *syncbuf.Buffer) *env {
	t.Helper()
	return newEnv(t, func(c *coordinator.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
}

func gitSource(url, ref string, depth int) *sandbox.Source {
	return &sandbox.Source{Git: &sandbox.GitSource{URL: url, Ref: ref, Depth: depth}}
}

// readWork reads a file of sandbox id's workspace as a client does.
func (e *env) readWork(id, name string) string {
	e.t.Helper()
	ws, err := e.co.Files(context.Background(), id)
	if err != nil {
		e.t.Fatalf("Files(%s): %v", id, err)
	}
	defer ws.Close()
	f, err := ws.ReadFile(name)
	if err != nil {
		e.t.Fatalf("ReadFile(%s): %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// failedSource waits until sb failed for its source and returns the
// sandbox and its sandbox.error, checked to be source_failed, to say what
// the status detail says, and to name no path of the server's.
func (e *env) failedSource(sb sandbox.Sandbox) (sandbox.Sandbox, *sandbox.SandboxError) {
	e.t.Helper()
	got := e.waitStatus(sb.ID, sandbox.StatusFailed)
	se := sandboxError(e.waitFor(sb.ID, 0, isType(sandbox.TypeSandboxError)))
	if se.Code != sandbox.ErrSourceFailed {
		e.t.Fatalf("sandbox.error %+v, want %s", se, sandbox.ErrSourceFailed)
	}
	if !strings.HasPrefix(se.Message, "the repository could not be cloned: ") || se.Message != got.StatusDetail {
		e.t.Errorf("sandbox.error %q, status detail %q: want the same, saying the clone failed", se.Message, got.StatusDetail)
	}
	if strings.Contains(se.Message, e.dir) || strings.Contains(se.Message, os.TempDir()) {
		e.t.Errorf("sandbox.error %q names a path of the server's", se.Message)
	}
	return got, se
}

// TestGitSource creates sandboxes from repositories of a git server on
// loopback, git unconfined as the agents are here: each kind of source
// and of failure, as the sandbox, its log and the server log tell it.
func TestGitSource(t *testing.T) {
	srv := gittest.NewServer(t)
	ctx := context.Background()

	t.Run("Public", func(t *testing.T) {
		e := newSourceEnv(t, &syncbuf.Buffer{})
		srv.Hold() // the clone waits at its first request
		sb := e.create(sandbox.CreateParams{Source: gitSource(srv.Public(), "", 1)})
		want := sandbox.GitSource{URL: srv.Public(), Depth: 1}
		if sb.Source == nil || sb.Source.Git == nil || *sb.Source.Git != want {
			t.Fatalf("created with source %+v, want %+v", sb.Source, want)
		}
		e.waitDetail(sb.ID, "cloning "+srv.Public())
		if _, err := e.co.Files(ctx, sb.ID); sandbox.ErrorType(err) != sandbox.EConflict {
			t.Errorf("Files while cloning: %v, want conflict", err)
		}
		srv.Release()
		got := e.waitStatus(sb.ID, sandbox.StatusReady)
		if got.Source == nil || got.Source.Git == nil || *got.Source.Git != want {
			t.Errorf("ready with source %+v, want %+v", got.Source, want)
		}
		if a, b := e.readWork(sb.ID, "a.txt"), e.readWork(sb.ID, "b.txt"); a != "two\n" || b != "b\n" {
			t.Errorf("a.txt %q, b.txt %q: want main's", a, b)
		}
		if got := gittest.Out(t, e.workDir(sb.ID), "rev-parse", "HEAD"); got != srv.Two {
			t.Errorf("HEAD %s, want %s", got, srv.Two)
		}
		if c := completed(e.turnOf(sb, "hello")); c.Status != sandbox.TurnSucceeded {
			t.Errorf("a turn in the clone: %+v", c)
		}
	})

	t.Run("Private", func(t *testing.T) {
		var log syncbuf.Buffer
		e := newSourceEnv(t, &log)
		sb := e.create(sandbox.CreateParams{
			Source:  gitSource(srv.Private(), "feature", 0),
			Secrets: map[string]string{coordinator.GitTokenSecret: gittest.Token},
		})
		got := e.waitStatus(sb.ID, sandbox.StatusReady)
		if c := e.readWork(sb.ID, "c.txt"); c != "c\n" {
			t.Errorf("c.txt %q, want feature's", c)
		}
		b, _ := json.Marshal(got)
		gittest.AssertNoToken(t, "the sandbox", string(b), gittest.Token)
		gittest.AssertNoToken(t, "the log's events", e.logText(sb.ID), gittest.Token)
		gittest.AssertNoToken(t, "the server log", log.String(), gittest.Token)
	})

	t.Run("WrongToken", func(t *testing.T) {
		var log syncbuf.Buffer
		e := newSourceEnv(t, &log)
		const wrong = "ghp_wrongTokenOfTheTests9876543210dcba"
		sb := e.create(sandbox.CreateParams{
			Source:  gitSource(srv.Private(), "", 1),
			Secrets: map[string]string{coordinator.GitTokenSecret: wrong},
		})
		got, se := e.failedSource(sb)
		if want := "the repository refused the credential; check secrets.GIT_TOKEN"; !strings.Contains(se.Message, want) {
			t.Errorf("sandbox.error %q, want it to say %q", se.Message, want)
		}
		// git was given the token, so its absence below means something.
		header := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+wrong))
		if !slices.Contains(srv.Auth(), header) {
			t.Fatalf("the git server never saw the credential: %q", srv.Auth())
		}
		if !strings.Contains(log.String(), "git source: git failed") {
			t.Errorf("the server log lacks git's failure:\n%s", log.String())
		}
		b, _ := json.Marshal(got)
		gittest.AssertNoToken(t, "the sandbox", string(b), wrong)

		// Another turn boots the sandbox again: it fails as the first
		// boot did, without cloning again.
		before := len(srv.Auth())
		evs := e.turnOf(sb, "hello")
		if c := completed(evs); c == nil || c.Status != sandbox.TurnFailed || c.Error == nil ||
			c.Error.Code != sandbox.ErrSourceFailed || c.Error.Message != se.Message {
			t.Errorf("a turn on the failed sandbox: %+v, want failed with %s %q", c, sandbox.ErrSourceFailed, se.Message)
		}
		if n := len(srv.Auth()) - before; n != 0 {
			t.Errorf("the turn cloned again: %d requests", n)
		}
		e.waitStatus(sb.ID, sandbox.StatusFailed)

		gittest.AssertNoToken(t, "the log's events", e.logText(sb.ID), wrong)
		gittest.AssertNoToken(t, "the server log", log.String(), wrong)
	})

	t.Run("BadRef", func(t *testing.T) {
		e := newSourceEnv(t, &syncbuf.Buffer{})
		sb := e.create(sandbox.CreateParams{Source: gitSource(srv.Public(), "no-such-branch", 1)})
		_, se := e.failedSource(sb)
		if want := `ref "no-such-branch" was not found in ` + srv.Public(); !strings.Contains(se.Message, want) {
			t.Errorf("sandbox.error %q, want it to say %q", se.Message, want)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		e := newSourceEnv(t, &syncbuf.Buffer{})
		host := "127.0.0.1:" + strconv.Itoa(gittest.ClosedPort(t))
		sb := e.create(sandbox.CreateParams{Source: gitSource("http://"+host+"/pub.git", "", 0)})
		_, se := e.failedSource(sb)
		if want := "could not reach the git server " + host; !strings.Contains(se.Message, want) {
			t.Errorf("sandbox.error %q, want it to say %q", se.Message, want)
		}
	})

	// A delete ends the clone under way: its agent slot is free for
	// another sandbox, and what it cloned is removed.
	t.Run("DeleteWhileCloning", func(t *testing.T) {
		e := newEnv(t, func(c *coordinator.Config) { c.MaxAgents = 1 })
		srv.Hold()
		defer srv.Release()
		sb := e.create(sandbox.CreateParams{Source: gitSource(srv.Public(), "", 1)})
		e.waitDetail(sb.ID, "cloning")
		if _, err := e.co.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		other := e.create(sandbox.CreateParams{})
		if c := completed(e.turnOf(other, "hello")); c.Status != sandbox.TurnSucceeded {
			t.Fatalf("a turn of another sandbox: %+v", c)
		}
		if _, err := os.Stat(e.workDir(sb.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the deleted sandbox's workspace: %v, want it removed", err)
		}
	})

	// A restart boots the sandbox again on what its agent left: the clone
	// is not made again over it.
	t.Run("Restart", func(t *testing.T) {
		e := newSourceEnv(t, &syncbuf.Buffer{})
		sb := e.create(sandbox.CreateParams{Source: gitSource(srv.Public(), "", 1)})
		e.waitStatus(sb.ID, sandbox.StatusReady)
		ws, err := e.co.Files(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ws.WriteFile("a.txt", strings.NewReader("changed\n"), sandbox.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
		ws.Close()
		before := len(srv.Auth())

		e.co.Close()
		co, err := coordinator.New(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.co = co
		if err := co.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if c := completed(e.turnOf(sb, "hello")); c.Status != sandbox.TurnSucceeded {
			t.Fatalf("a turn after the restart: %+v", c)
		}
		if got := e.readWork(sb.ID, "a.txt"); got != "changed\n" {
			t.Errorf("a.txt %q after the restart, want the change kept", got)
		}
		if n := len(srv.Auth()) - before; n != 0 {
			t.Errorf("the restart cloned again: %d requests", n)
		}
	})
}

// TestGitSourceInvalid: a source the server would never clone is refused
// at create, and no sandbox is made of it.
func TestGitSourceInvalid(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name string
		src  *sandbox.Source
		want string
	}{
		{"ssh", gitSource("ssh://git@github.com/a/b.git", "", 0), "want an https or http URL"},
		{"scp", gitSource("git@github.com:a/b.git", "", 0), "want an https or http URL"},
		{"credential", gitSource("https://alice:hunter2secret@github.com/a/b.git", "", 0), "put the token in secrets.GIT_TOKEN"},
		{"no git", &sandbox.Source{}, "source needs git"},
		{"option ref", gitSource("https://github.com/a/b.git", "--upload-pack=touch /tmp/x", 0), `starts with "-"`},
	} {
		_, err := e.co.CreateSandbox(context.Background(), sandbox.CreateParams{Source: c.src})
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Type != sandbox.EInvalidRequest || !strings.Contains(se.Message, c.want) {
			t.Errorf("%s: %v, want invalid_request saying %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(se.Message, "hunter2") {
			t.Errorf("%s: %q shows the credential", c.name, se.Message)
		}
	}
	if sbs, _, err := e.store.Sandboxes(context.Background(), "", 10); err != nil || len(sbs) != 0 {
		t.Errorf("sandboxes %v (%v), want none", sbs, err)
	}
}
