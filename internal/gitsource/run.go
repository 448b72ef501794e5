package gitsource

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

// run is one Clone under way: git's path, environment and what to redact.
type run struct {
	j      Job
	gitBin string
	env    []string
	// byFetch: the ref is a commit or a full ref name, which git clone
	// --branch cannot take; the repository is made with init and fetch.
	byFetch bool
	secrets []string // the token and its encodings, never shown or logged
}

// commitRef is a full commit id (SHA-1 or SHA-256): servers only give a
// commit by its whole id.
var commitRef = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
})

// waitDelay bounds how long a killed git's output may stay open.
const waitDelay = 5 * time.Second

// tailMax is how much of git's output is kept, its end: where git says
// what went wrong.
const tailMax = 16 << 10

func newRun(j Job) (*run, error) {
	// The server's PATH, as for agents: a sandbox must not choose what
	// the server runs.
	bin, err := exec.LookPath("git")
	if err != nil {
		return nil, &Failure{Message: "git is not installed on this server (apt-get install git)"}
	}
	r := &run{j: j, gitBin: bin, byFetch: commitRef().MatchString(j.Source.Ref) || strings.HasPrefix(j.Source.Ref, "refs/")}
	if j.Token != "" {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + j.Token))
		r.secrets = []string{j.Token, basic, base64.StdEncoding.EncodeToString([]byte(j.Token))}
	}
	r.env = r.environ()
	return r, nil
}

// kept are the variables of the base environment git keeps: where to find
// programs, how to reach the network, which CAs to trust.
var kept = map[string]bool{
	"PATH": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "CURL_CA_BUNDLE": true,
	"GIT_SSL_CAINFO": true, "GIT_SSL_CAPATH": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
}

// environ is git's whole environment: what it keeps of the base, and the
// settings of the package comment as GIT_CONFIG_* pairs.
func (r *run) environ() []string {
	var env []string
	hasPath := false
	for _, kv := range r.j.Env {
		k, _, _ := strings.Cut(kv, "=")
		if kept[k] {
			env = append(env, kv)
			hasPath = hasPath || k == "PATH"
		}
	}
	if !hasPath {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	home := r.j.Dir
	if r.j.Sandbox != "" {
		home = filepath.Join(r.j.Sandbox, "home")
	}
	env = append(env,
		"HOME="+home,
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
	)
	config := [][2]string{
		{"protocol.allow", "never"},
		{"protocol.https.allow", "always"},
		{"protocol.http.allow", "always"},
		{"core.hooksPath", "/dev/null"},
		{"submodule.recurse", "false"},
		{"credential.helper", ""},
		{"init.defaultBranch", "main"},
		{"advice.detachedHead", "false"},
	}
	if r.j.Token != "" {
		config = append(config, [2]string{"http." + origin(r.j.Source.URL) + ".extraHeader", "Authorization: Basic " + r.secrets[1]})
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(config)))
	for i, kv := range config {
		n := strconv.Itoa(i)
		env = append(env, "GIT_CONFIG_KEY_"+n+"="+kv[0], "GIT_CONFIG_VALUE_"+n+"="+kv[1])
	}
	return env
}

// origin is the scheme, host and port of a URL Check accepted, with a
// slash: the credential goes to the repository's server and nowhere else.
func origin(raw string) string {
	u, _ := url.Parse(raw)
	return strings.ToLower(u.Scheme) + "://" + u.Host + "/"
}

// steps are the git commands that fetch the repository into Dir, and the
// one that checks it out. The URL and the ref come after "--" or in a
// place git reads no option from; Check refused a leading '-' anyway.
func (r *run) steps() (fetch [][]string, checkout []string) {
	src := r.j.Source
	var depth []string
	if src.Depth > 0 {
		depth = []string{"--depth", strconv.Itoa(src.Depth)}
	}
	if r.byFetch {
		fetch = [][]string{
			{"init", "--quiet"},
			{"remote", "add", "origin", src.URL},
			append(append([]string{"fetch", "--quiet", "--no-tags", "--no-recurse-submodules"}, depth...), "origin", src.Ref),
		}
		return fetch, []string{"checkout", "--quiet", "--detach", "FETCH_HEAD"}
	}
	clone := append([]string{"clone", "--quiet", "--no-checkout", "--no-recurse-submodules"}, depth...)
	if src.Ref != "" {
		clone = append(clone, "--branch", src.Ref)
	}
	clone = append(clone, "--", src.URL, ".")
	// What clone would have checked out: HEAD, the branch or tag asked for.
	return [][]string{clone}, []string{"checkout", "--quiet", "--force", "HEAD"}
}

// checkoutName names what is checked out, for the status detail: the ref
// asked for, else the branch the remote's HEAD named.
func (r *run) checkoutName() string {
	if r.j.Source.Ref != "" {
		return r.j.Source.Ref
	}
	root, err := os.OpenRoot(r.j.Dir)
	if err == nil {
		defer root.Close()
		if b, err := root.ReadFile(".git/HEAD"); err == nil {
			if name, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: refs/heads/"); ok && len(name) <= maxRefLen {
				return name
			}
		}
	}
	return "the default branch"
}

// git runs git with args in Dir, confined as the agent is when there is a
// launcher, and returns its output (redacted). Its error is a *Failure, or
// ctx's when ctx was canceled.
func (r *run) git(ctx context.Context, args []string) (string, error) {
	var out tail
	cmd := exec.CommandContext(ctx, r.gitBin, args...)
	cmd.Args[0] = "git"
	cmd.Dir = r.j.Dir
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	// An unconfined git gets a process group of its own, so that a timeout
	// also ends the helpers it started (git-remote-https); the launcher
	// replaces it with a session of its own, whose group is the same pid.
	agent.SetProcessGroup(cmd)
	// The launcher is its namespace's PID 1 and leads its own session:
	// killing its group ends every git process under it.
	cmd.Cancel = func() error { agent.KillGroup(cmd); return nil }
	release, err := r.start(cmd)
	if err != nil {
		if ctx.Err() != nil {
			return "", r.ctxFailure(ctx)
		}
		r.j.Log.Error("git source: git could not start", "step", args[0], "err", r.redact(err.Error()))
		var opt *confine.OptionError
		if errors.As(err, &opt) && opt.Field == "Network" {
			// The operator's to fix, and said in the operator's terms.
			return "", failf("git needs an open network to clone, which this server cannot give: %s", strings.TrimPrefix(opt.Msg, "open: "))
		}
		return "", &Failure{Message: "git could not be started on this server; the server log says why"}
	}
	err = cmd.Wait()
	release()
	text := r.redact(out.String())
	if ctx.Err() != nil {
		return text, r.ctxFailure(ctx)
	}
	if err != nil {
		r.j.Log.Warn("git source: git failed", "step", args[0], "url", Shown(r.j.Source.URL), "err", err.Error(), "output", text)
		return text, r.classify(args[0], text)
	}
	return text, nil
}

// start starts cmd through the launcher, with the network open: a clone
// needs one whatever the agent's registry entry says.
func (r *run) start(cmd *exec.Cmd) (release func(), err error) {
	if r.j.Launcher == nil {
		return func() {}, cmd.Start()
	}
	conf := r.j.Confinement
	conf.Network = confine.NetworkOpen
	sb := r.j.Sandbox
	if sb == "" {
		sb = filepath.Dir(r.j.Dir)
	}
	return r.j.Launcher.Start(cmd, sb, conf)
}

// ctxFailure is what a done ctx makes of the clone: a Failure when its
// deadline passed, its own error when it was canceled (the sandbox was
// deleted, the server is stopping).
func (r *run) ctxFailure(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return failf("the clone of %s did not finish in time", Shown(r.j.Source.URL))
	}
	return ctx.Err()
}

// verify checks that git wrote the credential nowhere it keeps: a clone
// whose .git/config held it would hand it to the agent.
func (r *run) verify() error {
	if len(r.secrets) == 0 {
		return nil
	}
	unchecked := func(err error) error {
		r.j.Log.Error("git source: .git/config could not be checked for the credential", "err", err)
		return &Failure{Message: "the clone could not be checked; the server log says why"}
	}
	root, err := os.OpenRoot(r.j.Dir)
	if err != nil {
		return unchecked(err)
	}
	defer root.Close()
	b, err := root.ReadFile(".git/config")
	if err != nil {
		return unchecked(err)
	}
	for _, s := range r.secrets {
		if bytes.Contains(b, []byte(s)) {
			r.j.Log.Error("git source: the credential reached .git/config; the clone is removed")
			if err := root.RemoveAll(".git"); err != nil {
				return unchecked(err)
			}
			return &Failure{Message: "the clone was refused: git kept the credential in the repository's configuration"}
		}
	}
	return nil
}

// redact takes the credential out of s, in every form git was given it.
func (r *run) redact(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// tail keeps the last tailMax bytes written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
