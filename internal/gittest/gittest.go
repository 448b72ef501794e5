// Package gittest serves git repositories over smart HTTP on 127.0.0.1,
// for the tests of git sources (docs/workspace.md): git http-backend behind
// net/http/cgi, as a forge serves them, with a private repository that
// takes a token as GitHub does. git must be installed (.ci/run installs
// it); a test fails without it rather than skip.
package gittest

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

// Token is what the private repository takes, as a GitHub token looks:
// any user name, Token as the password.
const Token = "ghp_s3cretT0kenOfTheTests0123456789abcd"

// Server is a git smart-HTTP server on 127.0.0.1 serving, until the test
// ends:
//
//   - /pub.git: public, with the history below;
//   - /private/priv.git: the same history, behind Basic auth with Token;
//   - /empty.git: a repository without any commit;
//   - /hang/…: a server that never answers;
//   - anything else: 404, as a repository that does not exist.
type Server struct {
	URL  string // http://127.0.0.1:port
	Port int
	// Commits of the repositories' history, oldest first: "one" (a.txt
	// "one\n", tagged v1) and "two" (a.txt "two\n", b.txt "b\n") on main,
	// the default branch; "three" (c.txt "c\n") on the branch feature,
	// after "two".
	One, Two, Three string

	mu   sync.Mutex
	auth []string      // the Authorization headers received, in order
	held chan struct{} // while not nil, requests wait until it is closed
}

// NewServer makes the repositories and serves them until the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	gitBin := Git(t)
	root, src := t.TempDir(), t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(Env(src), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
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
	s := &Server{}
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
		held := s.held
		s.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-r.Context().Done():
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/private/") {
			if _, pass, ok := r.BasicAuth(); !ok || pass != Token {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/hang/") {
			<-r.Context().Done()
			return
		}
		backend.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// Before Close, which waits for the requests a hold keeps.
	t.Cleanup(s.Release)
	s.URL = srv.URL
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s.Port, _ = strconv.Atoi(port)
	return s
}

// Public is the public repository's URL.
func (s *Server) Public() string { return s.URL + "/pub.git" }

// Private is the URL of the repository that takes Token.
func (s *Server) Private() string { return s.URL + "/private/priv.git" }

// Auth is the Authorization headers of the requests received so far, in
// order ("" for a request without one): as many as the requests.
func (s *Server) Auth() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Hold makes the requests that come until Release wait for it (or for
// their client to go away): a clone stopped at its first request, so a
// test sees what is true while it runs.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
}

// Release lets the requests Hold keeps go on, and those to come.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// Git is git's path: the tests fail without it, as CI installs it.
func Git(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is not installed: apt-get install git (.ci/run installs it)")
	}
	return p
}

// Env is an environment for a test's own git commands: no configuration
// of the machine's.
func Env(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
}

// Out runs git in a clone a test made and returns its output, trimmed. It
// runs as the test's user, which may not own the clone (root reads the
// agent's), so every directory is safe.
func Out(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(Git(t), append([]string{"-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = Env(t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return strings.TrimSpace(out.String())
}

// AssertNoToken fails the test unless text holds no piece of token of 8
// bytes or more, and not the Basic credential git is given either.
func AssertNoToken(t testing.TB, where, text, token string) {
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

// ClosedPort is a port of 127.0.0.1 that nothing listens on: an
// unreachable git server.
func ClosedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
