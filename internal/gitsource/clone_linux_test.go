package gitsource_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/gitsource"
	"github.com/sparkles-dev/sparkles/internal/gittest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// cloneTimeout bounds one clone of a test; the timeout case sets its own.
const cloneTimeout = 2 * time.Minute

// result is what one Clone of a test did.
type result struct {
	sandbox, dir string
	err          error
	progress     []string
	log          string
}

// cloner runs clones of one test, each in a sandbox of its own under a
// data dir, as the server lays them out.
type cloner struct {
	t        *testing.T
	data     string
	launcher agent.Launcher // nil: unconfined
	ports    []int          // the host ports the agent's entry gives
	n        int
}

// newCloner confines git with a launcher of this machine's, which must
// be able to: a server that cannot confine refuses to start.
func newCloner(t *testing.T, ports ...int) *cloner {
	t.Helper()
	gittest.Git(t)
	data := t.TempDir()
	l, err := confine.New(confine.Options{DataDir: data, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("confine.New: %v", err)
	}
	return &cloner{t: t, data: data, launcher: l, ports: ports}
}

func (c *cloner) clone(ctx context.Context, src sandbox.GitSource, token string) result {
	c.t.Helper()
	c.n++
	sb := filepath.Join(c.data, "sandboxes", "sb_"+strconv.Itoa(c.n))
	work := filepath.Join(sb, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		c.t.Fatal(err)
	}
	var log bytes.Buffer
	r := result{sandbox: sb, dir: work}
	r.err = gitsource.Clone(ctx, gitsource.Job{
		Source:      src,
		Dir:         work,
		Token:       token,
		Env:         []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=de_DE.UTF-8", "GIT_TOKEN=" + token, "GIT_DIR=/nowhere"},
		Launcher:    c.launcher,
		Sandbox:     sb,
		Confinement: agent.Confinement{Network: confine.NetworkNone, HostPorts: c.ports},
		Progress:    func(d string) { r.progress = append(r.progress, d) },
		Log:         slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	r.log = log.String()
	return r
}

func (c *cloner) mustClone(src sandbox.GitSource, token string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cloneTimeout)
	defer cancel()
	r := c.clone(ctx, src, token)
	if r.err != nil {
		c.t.Fatalf("Clone(%+v): %v\nlog: %s", src, r.err, r.log)
	}
	return r
}

// failure clones what must fail and returns the Failure, checked to be
// fit to show: bounded, no credential, no path of the server's.
func (c *cloner) failure(src sandbox.GitSource, token string) (*gitsource.Failure, result) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cloneTimeout)
	defer cancel()
	return c.mustFail(c.clone(ctx, src, token), token)
}

func (c *cloner) mustFail(r result, token string) (*gitsource.Failure, result) {
	c.t.Helper()
	var f *gitsource.Failure
	if !errors.As(r.err, &f) {
		c.t.Fatalf("Clone: %v (%T), want a *Failure\nlog: %s", r.err, r.err, r.log)
	}
	c.t.Logf("Failure: %s", f.Message)
	if len(f.Message) > 300 {
		c.t.Errorf("Failure %q: %d bytes, want at most 300", f.Message, len(f.Message))
	}
	for _, p := range []string{c.data, r.sandbox, os.TempDir()} {
		if strings.Contains(f.Message, p) {
			c.t.Errorf("Failure %q names the server's path %s", f.Message, p)
		}
	}
	if token != "" {
		gittest.AssertNoToken(c.t, "the Failure", f.Message, token)
		gittest.AssertNoToken(c.t, "the log", r.log, token)
		if b, err := os.ReadFile(filepath.Join(r.dir, ".git", "config")); err == nil {
			gittest.AssertNoToken(c.t, ".git/config", string(b), token)
		}
	}
	return f, r
}

// head is the commit checked out in dir.
func head(t *testing.T, dir string) string { return gittest.Out(t, dir, "rev-parse", "HEAD") }

// mustRead is a file of the clone.
func mustRead(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("the clone lacks %s: %v", name, err)
	}
	return string(b)
}

// assertOwned checks that every file of the clone is uid's, as the
// agent's own files are.
func assertOwned(t *testing.T, dir string, uid int) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
			t.Errorf("%s is uid %d's, want %d's", "."+strings.TrimPrefix(p, dir), got, uid)
			return filepath.SkipAll
		}
		n++
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("walk the clone: %v (%d entries)", err, n)
	}
}

// agentUID is the uid the agent's files are owned by on this server.
func agentUID() int {
	if os.Getuid() == 0 {
		return confine.AgentID
	}
	return os.Getuid()
}

// TestClone clones from a git server on the host's loopback, each kind of
// source and each kind of failure. What the confinement could change runs
// with git confined as an agent is, reaching the server through the
// agent's host port: the clone's owner, the credential, the network, a
// clone killed at its deadline. The rest (which ref is fetched, how a
// failure reads) runs git unconfined: confined, each git step starts a
// launcher, and those cases would prove nothing more. As root the public
// clone runs again as nobody: then git runs as the server's own uid, not
// AgentID, pasta as an unprivileged user, and the clone is that uid's.
func TestClone(t *testing.T) {
	srv := gittest.NewServer(t)
	pub, priv := srv.Public(), srv.Private()

	c := newCloner(t, srv.Port)
	t.Run("Public", func(t *testing.T) {
		c.t = t
		r := c.mustClone(sandbox.GitSource{URL: pub}, "")
		if got, want := head(t, r.dir), srv.Two; got != want {
			t.Errorf("HEAD %s, want main's %s", got, want)
		}
		if got, want := mustRead(t, r.dir, "a.txt"), "two\n"; got != want {
			t.Errorf("a.txt %q, want %q", got, want)
		}
		if got, want := gittest.Out(t, r.dir, "symbolic-ref", "HEAD"), "refs/heads/main"; got != want {
			t.Errorf("HEAD is %s, want %s", got, want)
		}
		if got, want := strings.Join(r.progress, " | "), "cloning "+pub+" | checking out main"; got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
		assertOwned(t, r.dir, agentUID()) // before status, which rewrites the index as root
		if got := gittest.Out(t, r.dir, "status", "--porcelain"); got != "" {
			t.Errorf("the clone is not clean:\n%s", got)
		}
	})
	t.Run("Private", func(t *testing.T) {
		c.t = t
		before := len(srv.Auth())
		r := c.mustClone(sandbox.GitSource{URL: priv, Depth: 1}, gittest.Token)
		if got, want := head(t, r.dir), srv.Two; got != want {
			t.Errorf("HEAD %s, want %s", got, want)
		}
		if got, want := strings.Join(r.progress, " | "), "cloning "+priv+" | checking out main"; got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
		assertOwned(t, r.dir, agentUID())
		b, err := os.ReadFile(filepath.Join(r.dir, ".git", "config"))
		if err != nil {
			t.Fatal(err)
		}
		gittest.AssertNoToken(t, ".git/config", string(b), gittest.Token)
		gittest.AssertNoToken(t, "the log", r.log, gittest.Token)
		if !strings.Contains(string(b), priv) {
			t.Errorf(".git/config does not name the remote %s:\n%s", priv, b)
		}
		if got := srv.Auth()[before:]; len(got) == 0 || got[0] == "" {
			t.Errorf("Authorization headers %q: want the credential from the first request on", got)
		}
	})
	t.Run("WrongToken", func(t *testing.T) {
		c.t = t
		wrong := "ghp_wrongTokenWrongToken0123456789"
		f, r := c.failure(sandbox.GitSource{URL: priv}, wrong)
		if want := "the repository refused the credential; check secrets.GIT_TOKEN"; !strings.Contains(f.Message, want) {
			t.Errorf("Failure %q, want it to say %q", f.Message, want)
		}
		if !strings.Contains(r.log, "git failed") {
			t.Errorf("the log lacks git's output:\n%s", r.log)
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		closed := gittest.ClosedPort(t)
		// Given to the agent (the launcher's forwarder finds nothing on
		// the host) and not given (nothing listens in its namespace).
		for _, ports := range [][]int{{srv.Port, closed}, {srv.Port}} {
			c.t, c.ports = t, ports
			url := "http://127.0.0.1:" + strconv.Itoa(closed) + "/pub.git"
			f, _ := c.failure(sandbox.GitSource{URL: url}, gittest.Token)
			if want := "could not reach the git server 127.0.0.1:" + strconv.Itoa(closed); !strings.HasPrefix(f.Message, want) {
				t.Errorf("ports %v: Failure %q, want %q", ports, f.Message, want)
			}
		}
		c.ports = []int{srv.Port}
	})
	t.Run("Timeout", func(t *testing.T) {
		c.t = t
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		f, _ := c.mustFail(c.clone(ctx, sandbox.GitSource{URL: srv.URL + "/hang/pub.git"}, ""), "")
		if want := "the clone of " + srv.URL + "/hang/pub.git did not finish in time"; f.Message != want {
			t.Errorf("Failure %q, want %q", f.Message, want)
		}
	})
	alsoAsNobody(t, "^Public$")

	u := &cloner{t: t, data: t.TempDir()}
	t.Run("Unconfined", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: pub, Ref: "v1"}, "")
		if got, want := head(t, r.dir), srv.One; got != want {
			t.Errorf("HEAD %s, want %s", got, want)
		}
		assertOwned(t, r.dir, os.Getuid())
	})
	t.Run("Depth1", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: pub, Depth: 1}, "")
		if got := gittest.Out(t, r.dir, "rev-list", "--count", "HEAD"); got != "1" {
			t.Errorf("%s commits, want 1", got)
		}
		if got, want := head(t, r.dir), srv.Two; got != want {
			t.Errorf("HEAD %s, want %s", got, want)
		}
	})
	t.Run("Branch", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: pub, Ref: "feature"}, "")
		if got, want := head(t, r.dir), srv.Three; got != want {
			t.Errorf("HEAD %s, want feature's %s", got, want)
		}
		mustRead(t, r.dir, "c.txt")
	})
	t.Run("Tag", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: pub, Ref: "v1", Depth: 1}, "")
		if got, want := head(t, r.dir), srv.One; got != want {
			t.Errorf("HEAD %s, want v1's %s", got, want)
		}
		if got, want := mustRead(t, r.dir, "a.txt"), "one\n"; got != want {
			t.Errorf("a.txt %q, want %q", got, want)
		}
	})
	t.Run("Commit", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: pub, Ref: srv.One}, "")
		if got, want := head(t, r.dir), srv.One; got != want {
			t.Errorf("HEAD %s, want %s", got, want)
		}
		if got, want := strings.Join(r.progress, " | "), "cloning "+pub+" | checking out "+srv.One; got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
		if _, err := os.Stat(filepath.Join(r.dir, "b.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("b.txt of a later commit: %v, want it absent", err)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: srv.URL + "/empty.git"}, "")
		entries, err := os.ReadDir(r.dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != ".git" {
			t.Errorf("the workspace holds %v (%v), want only .git", entries, err)
		}
		if got, want := strings.Join(r.progress, " | "), "cloning "+srv.URL+"/empty.git"; got != want {
			t.Errorf("progress %q, want %q", got, want)
		}
	})
	t.Run("PrivateCommit", func(t *testing.T) {
		u.t = t
		r := u.mustClone(sandbox.GitSource{URL: priv, Ref: srv.Three, Depth: 1}, gittest.Token)
		if got, want := head(t, r.dir), srv.Three; got != want {
			t.Errorf("HEAD %s, want %s", got, want)
		}
		b, err := os.ReadFile(filepath.Join(r.dir, ".git", "config"))
		if err != nil {
			t.Fatal(err)
		}
		gittest.AssertNoToken(t, ".git/config", string(b), gittest.Token)
	})
	t.Run("NoToken", func(t *testing.T) {
		u.t = t
		f, _ := u.failure(sandbox.GitSource{URL: priv}, "")
		if want := "asks for a credential: put a token in secrets.GIT_TOKEN"; !strings.Contains(f.Message, want) {
			t.Errorf("Failure %q, want it to say %q", f.Message, want)
		}
	})
	t.Run("BadRef", func(t *testing.T) {
		u.t = t
		for _, ref := range []string{"no-such-branch", strings.Repeat("ab", 20), "a657"} {
			f, _ := u.failure(sandbox.GitSource{URL: pub, Ref: ref, Depth: 1}, "")
			if want := `ref "` + ref + `" was not found in ` + pub; !strings.HasPrefix(f.Message, want) {
				t.Errorf("Failure %q, want %q", f.Message, want)
			}
		}
	})
	t.Run("NoRepository", func(t *testing.T) {
		u.t = t
		f, _ := u.failure(sandbox.GitSource{URL: srv.URL + "/nothing.git"}, "")
		if want := "no repository at " + srv.URL + "/nothing.git"; !strings.HasPrefix(f.Message, want) {
			t.Errorf("Failure %q, want %q", f.Message, want)
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		u.t = t
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if r := u.clone(ctx, sandbox.GitSource{URL: pub}, ""); !errors.Is(r.err, context.Canceled) {
			t.Errorf("Clone with a canceled ctx: %v, want context.Canceled", r.err)
		}
	})
}

// TestCloneWithoutNetwork: where the launcher cannot give git an open
// network (pasta is not installed), the clone fails saying so, in the
// operator's terms, rather than as an unreachable host. git never starts,
// so no server is needed.
func TestCloneWithoutNetwork(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(gittest.Git(t), filepath.Join(bin, "git")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin) // no pasta on it
	port := gittest.ClosedPort(t)
	c := newCloner(t, port)
	f, _ := c.failure(sandbox.GitSource{URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/pub.git"}, "")
	if want := "git needs an open network to clone, which this server cannot give: pasta is not installed"; !strings.HasPrefix(f.Message, want) {
		t.Errorf("Failure %q, want %q", f.Message, want)
	}
}
