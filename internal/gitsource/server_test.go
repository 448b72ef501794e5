package gitsource_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testToken is what the private repositories take, as a GitHub token looks.
const testToken = "ghp_s3cretT0kenOfTheTests0123456789abcd"

// gitServer is a git smart-HTTP server on 127.0.0.1: git http-backend
// behind net/http/cgi, serving the bare repositories under its root.
// Under /private/ it asks for Basic auth with testToken, as GitHub takes
// a token (any user name, the token as the password).
type gitServer struct {
	URL  string // http://127.0.0.1:port
	Port int
	// Commits of the repositories' history, oldest first: "one" (tagged
	// v1) and "two" on main; "three" on the branch feature, after "two".
	One, Two, Three string

	mu   sync.Mutex
	auth []string // the Authorization headers received, in order
}

// newGitServer makes the repositories pub.git and private/priv.git, both
// with the same history, and empty.git, without any, and serves them
// until the test ends.
func newGitServer(t *testing.T) *gitServer {
	t.Helper()
	gitBin := mustGit(t)
	root, src := t.TempDir(), t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(gitTestEnv(src), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &gitServer{}
	run(src, "init", "-q", "-b", "main")
	write("a.txt", "one\n")
	run(src, "add", ".")
	run(src, "commit", "-q", "-m", "one")
	run(src, "tag", "v1")
	s.One = run(src, "rev-parse", "HEAD")
	write("a.txt", "two\n")
	write("b.txt", "b\n")
	run(src, "add", ".")
	run(src, "commit", "-q", "-m", "two")
	s.Two = run(src, "rev-parse", "HEAD")
	run(src, "checkout", "-q", "-b", "feature")
	write("c.txt", "c\n")
	run(src, "add", ".")
	run(src, "commit", "-q", "-m", "three")
	s.Three = run(src, "rev-parse", "HEAD")
	run(src, "checkout", "-q", "main")
	for _, repo := range []string{"pub.git", "private/priv.git"} {
		dir := filepath.Join(root, repo)
		run(root, "init", "-q", "--bare", "-b", "main", dir)
		run(src, "push", "-q", dir, "main", "feature", "v1")
	}
	run(root, "init", "-q", "--bare", "-b", "main", "empty.git")
	// The repositories are read by git http-backend as this process's
	// user: as nobody, t.TempDir is already theirs.
	backend := &cgi.Handler{
		Path: gitBin,
		Args: []string{"http-backend"},
		Dir:  root,
		// Its complaints (a missing repository) are the tests' cases.
		Stderr: io.Discard,
		Env:    []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + src},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/private/") {
			if _, pass, ok := r.BasicAuth(); !ok || pass != testToken {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/hang/") {
			<-r.Context().Done() // a server that never answers
			return
		}
		backend.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s.Port, _ = strconv.Atoi(port)
	return s
}

// authHeaders are the Authorization headers the server received.
func (s *gitServer) authHeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// mustGit is git's path: the tests fail without it, as CI installs it.
func mustGit(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is not installed: apt-get install git (.ci/run installs it)")
	}
	return p
}

// gitTestEnv is an environment for the tests' own git commands: no
// configuration of the machine's.
func gitTestEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
}

// gitOut runs git in a clone the tests made, as the test's user, which may
// not own it (root reads the agent's clone).
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(mustGit(t), append([]string{"-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = gitTestEnv(t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return strings.TrimSpace(out.String())
}

// assertNoToken fails unless text holds no piece of token of 8 bytes or
// more, and not its base64 either.
func assertNoToken(t *testing.T, where, text, token string) {
	t.Helper()
	for i := 0; i+8 <= len(token); i++ {
		if strings.Contains(text, token[i:i+8]) {
			t.Errorf("%s holds part of the token (%q):\n%s", where, token[i:i+8], text)
			return
		}
	}
	if strings.Contains(text, "eC1hY2Nlc3MtdG9rZW46") { // base64("x-access-token:")
		t.Errorf("%s holds the encoded credential:\n%s", where, text)
	}
}
