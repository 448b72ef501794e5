package gitsource_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/gitsource"
	"github.com/sparkles-dev/sparkles/internal/gittest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestCheck(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		for _, src := range []sandbox.GitSource{
			{URL: "https://github.com/sparkles-dev/sparkles.git"},
			{URL: "HTTP://127.0.0.1:8080/repo", Ref: "main", Depth: 1},
			{URL: "https://git.example.com/a/b", Ref: "refs/pull/7/head", Depth: gitsource.MaxDepth},
			{URL: "https://git.example.com/a/b", Ref: "v1.2.3"},
			{URL: "https://git.example.com/a/b", Ref: strings.Repeat("0a", 20)},
			{URL: "https://[::1]:3000/a.git", Ref: "feature/x-y_z"},
		} {
			if err := gitsource.Check(src); err != nil {
				t.Errorf("Check(%+v): %v, want nil", src, err)
			}
		}
	})
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		for _, c := range []struct {
			src  sandbox.GitSource
			want string
		}{
			{sandbox.GitSource{}, "source.git.url is required"},
			{sandbox.GitSource{URL: "git@github.com:a/b.git"}, "want an https or http URL"},
			{sandbox.GitSource{URL: "ssh://git@github.com/a/b.git"}, "want an https or http URL"},
			{sandbox.GitSource{URL: "file:///etc"}, "want an https or http URL"},
			{sandbox.GitSource{URL: "/srv/repo.git"}, "want an https or http URL"},
			{sandbox.GitSource{URL: "ext::sh -c touch% /tmp/x"}, "space"},
			{sandbox.GitSource{URL: "https://x-access-token:ghp_secret@github.com/a/b"}, "put the token in secrets.GIT_TOKEN"},
			{sandbox.GitSource{URL: "https://ghp_secret@github.com/a/b"}, "put the token in secrets.GIT_TOKEN"},
			{sandbox.GitSource{URL: "https://github.com/a/b?private_token=ghp_secret"}, "query string"},
			{sandbox.GitSource{URL: "https://github.com/a/b#main"}, "source.git.ref"},
			{sandbox.GitSource{URL: "https:///a/b"}, "no host"},
			{sandbox.GitSource{URL: "https://github.com/a/b\n"}, "control character"},
			{sandbox.GitSource{URL: "https://github.com/" + strings.Repeat("a", 2048)}, "longer than"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: "--upload-pack=touch /tmp/x"}, `starts with "-"`},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: "+main"}, `starts with "+"`},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: "main:refs/heads/x"}, "not a valid"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: "a\x00b"}, "not a valid"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: "a..b"}, "not a valid"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Ref: strings.Repeat("r", 256)}, "longer than"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Depth: -1}, "source.git.depth -1"},
			{sandbox.GitSource{URL: "https://github.com/a/b", Depth: gitsource.MaxDepth + 1}, "source.git.depth"},
		} {
			err := gitsource.Check(c.src)
			var e *sandbox.Error
			if !errors.As(err, &e) || e.Type != sandbox.EInvalidRequest || !strings.Contains(e.Message, c.want) {
				t.Errorf("Check(%+v): %v, want invalid_request saying %q", c.src, err, c.want)
				continue
			}
			if strings.Contains(e.Message, "ghp_secret") {
				t.Errorf("Check(%+v): %q shows the credential", c.src, e.Message)
			}
		}
	})
}

func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/a/b.git":                        "https://github.com/a/b.git",
		"https://x-access-token:ghp_s@github.com/a/b.git":   "https://github.com/a/b.git",
		"https://ghp_s@github.com/a/b.git":                  "https://github.com/a/b.git",
		"https://github.com/a/b.git?private_token=ghp_s#x":  "https://github.com/a/b.git",
		"http://127.0.0.1:8080/pub.git":                     "http://127.0.0.1:8080/pub.git",
		"https://user:p%40ss@git.example.com:8443/r?x=1#yz": "https://git.example.com:8443/r",
		"::not a url": "the repository",
	} {
		if got := gitsource.Shown(in); got != want {
			t.Errorf("Shown(%q) = %q, want %q", in, got, want)
		}
	}
}

// recorder is a launcher that starts git unconfined and keeps what it was
// asked to run: the commands Clone builds, as any process of the machine
// would see them.
type recorder struct {
	mu    sync.Mutex
	cmds  []*exec.Cmd
	extra []agent.Confinement
}

func (r *recorder) Start(cmd *exec.Cmd, _ string, extra agent.Confinement) (func(), error) {
	r.mu.Lock()
	r.cmds, r.extra = append(r.cmds, cmd), append(r.extra, extra)
	r.mu.Unlock()
	return func() {}, cmd.Start()
}

// TestCredential: the token reaches git only in its environment, as an
// HTTP header for the repository's origin; never in argv, never in the
// URL git stores; and git is told to run no hook, read no configuration
// of the machine's, speak only http(s), prompt for nothing, and have the
// network open whatever the agent's entry says.
func TestCredential(t *testing.T) {
	srv := gittest.NewServer(t)
	rec := &recorder{}
	sb := t.TempDir()
	work := filepath.Join(sb, "work")
	os.Mkdir(work, 0o700)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := srv.URL + "/private/priv.git"
	err := gitsource.Clone(ctx, gitsource.Job{
		Source:      sandbox.GitSource{URL: url, Ref: srv.One},
		Dir:         work,
		Token:       gittest.Token,
		Env:         []string{"PATH=" + os.Getenv("PATH"), "GIT_TOKEN=" + gittest.Token, "GIT_ASKPASS=/bin/true", "GIT_CONFIG_PARAMETERS='core.hooksPath'='.'"},
		Launcher:    rec,
		Sandbox:     sb,
		Confinement: agent.Confinement{Network: "none", HostPorts: []int{srv.Port}},
	})
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	if len(rec.cmds) != 4 { // init, remote add, fetch, checkout
		t.Fatalf("%d git commands, want 4", len(rec.cmds))
	}
	header := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gittest.Token))
	for i, cmd := range rec.cmds {
		args := strings.Join(cmd.Args, " ")
		gittest.AssertNoToken(t, "argv "+args, args, gittest.Token)
		if got := rec.extra[i]; got.Network != "open" || !slices.Equal(got.HostPorts, []int{srv.Port}) {
			t.Errorf("%s: confinement %+v, want the network open and the agent's host ports", args, got)
		}
		env := map[string]string{}
		for _, kv := range cmd.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		for k, want := range map[string]string{
			"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
			"HOME": filepath.Join(sb, "home"), "GIT_TOKEN": "", "GIT_ASKPASS": "", "GIT_CONFIG_PARAMETERS": "",
		} {
			if env[k] != want {
				t.Errorf("%s: %s=%q, want %q", args, k, env[k], want)
			}
		}
		config := map[string]string{}
		for k, v := range env {
			if n, ok := strings.CutPrefix(k, "GIT_CONFIG_KEY_"); ok {
				config[v] = env["GIT_CONFIG_VALUE_"+n]
			}
		}
		for k, want := range map[string]string{
			"protocol.allow": "never", "protocol.https.allow": "always", "protocol.http.allow": "always",
			"core.hooksPath": "/dev/null", "submodule.recurse": "false",
			"http." + srv.URL + "/.extraHeader": header,
		} {
			if config[k] != want {
				t.Errorf("%s: config %s=%q, want %q", args, k, config[k], want)
			}
		}
		if len(config) == 0 || env["GIT_CONFIG_COUNT"] == "" {
			t.Errorf("%s: no GIT_CONFIG_COUNT", args)
		}
	}
	if got := rec.cmds[1].Args; !slices.Contains(got, url) {
		t.Errorf("remote add %q, want the URL as given", got)
	}
}

// TestClassify: git's words for each failure become the project's, and
// an unknown one is shown without any path of the server's.
func TestClassify(t *testing.T) {
	job := gitsource.Job{
		Source:  sandbox.GitSource{URL: "https://git.example.com/team/app.git", Ref: "main"},
		Dir:     "/var/lib/sparkles/sandboxes/sb_1/work",
		Sandbox: "/var/lib/sparkles/sandboxes/sb_1",
	}
	for _, c := range []struct{ step, out, want string }{
		{"clone", "fatal: unable to access 'https://git.example.com/team/app.git/': Could not resolve host: git.example.com",
			"could not reach the git server git.example.com: its name does not resolve"},
		{"clone", "fatal: unable to access 'https://git.example.com/team/app.git/': Failed to connect to git.example.com port 443 after 3 ms: Connection timed out",
			"could not reach the git server git.example.com: the connection timed out"},
		{"clone", "fatal: unable to access 'https://git.example.com/team/app.git/': SSL certificate problem: self-signed certificate",
			"could not reach the git server git.example.com securely: its TLS certificate is not trusted or the handshake failed"},
		{"clone", "remote: Repository not found.\nfatal: repository 'https://git.example.com/team/app.git/' not found",
			"no repository at https://git.example.com/team/app.git (a private one needs a token in secrets.GIT_TOKEN)"},
		{"clone", "fatal: unable to access 'https://git.example.com/team/app.git/': The requested URL returned error: 502",
			"the git server git.example.com answered HTTP 502"},
		{"checkout", "error: unable to write file big.bin: No space left on device\nfatal: unable to checkout working tree",
			"the workspace ran out of disk space while git wrote https://git.example.com/team/app.git"},
		{"clone", "fatal: could not create work tree dir '/var/lib/sparkles/sandboxes/sb_1/work/x': Permission denied",
			"git could not clone https://git.example.com/team/app.git: could not create work tree dir './x': Permission denied"},
		{"checkout", "fatal: cannot open '/etc/sparkles/secret': Permission denied",
			"git could not check out https://git.example.com/team/app.git: cannot open '…': Permission denied"},
		{"clone", "Killed", "git could not clone https://git.example.com/team/app.git"},
	} {
		if got := gitsource.Classify(job, c.step, c.out); got.Message != c.want {
			t.Errorf("%s %q:\n got %q\nwant %q", c.step, c.out, got.Message, c.want)
		}
	}
	long := job
	long.Source.URL = "https://git.example.com/" + strings.Repeat("ü", 400)
	if got := gitsource.Classify(long, "clone", "fatal: Authentication failed").Message; len(got) > 300 || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("a long message: %d bytes, %q: want at most 300, cut at a rune with …", len(got), got)
	}
}
