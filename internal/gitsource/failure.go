package gitsource

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Why a clone failed, told apart by git's words (LC_ALL=C) and curl's,
// which git passes on. Each list is matched in this order: a refused
// credential also makes git say it could not read a user name, and an
// unreachable host says nothing of refs.
var (
	unreachable = []string{
		"Could not resolve host", "Could not resolve proxy", "Failed to connect to",
		"Couldn't connect to server", "Connection refused", "Connection timed out",
		"Operation timed out", "Empty reply from server", "Connection reset by peer",
		"Network is unreachable", "No route to host",
	}
	tlsFailed = []string{
		"SSL certificate problem", "server certificate verification failed", "SSL_ERROR",
		"SSL routines", "gnutls_handshake", "SSL connect error",
	}
	authRefused = []string{
		"Authentication failed", "could not read Username", "could not read Password",
		"terminal prompts disabled", "The requested URL returned error: 401",
		"The requested URL returned error: 403",
	}
	repoMissing = []string{
		"The requested URL returned error: 404", "not found: did you run git update-server-info",
		"does not appear to be a git repository", "not valid: is this a git repository",
		"Repository not found",
	}
	refMissing = []string{
		"not found in upstream", "couldn't find remote ref", "not our ref",
		"unadvertised object", "reference is not a tree",
	}
	diskFull = []string{"No space left on device", "Disk quota exceeded"}
)

// repoNotFound matches git's "repository '<url>' not found", which names
// no ref.
var repoNotFound = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`repository '[^']*' not found`)
})

// serverError matches an HTTP error status of the git server's.
var serverError = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`The requested URL returned error: (5\d\d)`)
})

// shortHex is what looks like an abbreviated commit id.
var shortHex = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{4,39}$`)
})

// classify turns git's output (redacted) of a failed step into a Failure
// for people: which of the reasons it was, in the project's words.
func (r *run) classify(step, out string) *Failure {
	src := r.j.Source
	shown, host := Shown(src.URL), hostOf(src.URL)
	has := func(list []string) bool {
		for _, s := range list {
			if strings.Contains(out, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has(diskFull):
		return failf("the workspace ran out of disk space while git wrote %s", shown)
	case has(unreachable):
		return failf("could not reach the git server %s: %s", host, unreachableWhy(out))
	case has(tlsFailed):
		return failf("could not reach the git server %s securely: its TLS certificate is not trusted or the handshake failed", host)
	case has(authRefused) && r.j.Token != "":
		return failf("the repository refused the credential; check secrets.GIT_TOKEN (%s)", shown)
	case has(authRefused):
		return failf("the repository %s asks for a credential: put a token in secrets.GIT_TOKEN", shown)
	case has(repoMissing) || repoNotFound().MatchString(out):
		if r.j.Token != "" {
			return failf("no repository at %s, or the credential in secrets.GIT_TOKEN cannot see it", shown)
		}
		return failf("no repository at %s (a private one needs a token in secrets.GIT_TOKEN)", shown)
	case has(refMissing) || (step == "checkout" && src.Ref != "" && strings.Contains(out, "did not match")):
		msg := fmt.Sprintf("ref %q was not found in %s", src.Ref, shown)
		if shortHex().MatchString(src.Ref) {
			msg += " (give a commit by its full 40-character id)"
		}
		return failf("%s", msg)
	}
	if m := serverError().FindStringSubmatch(out); m != nil {
		return failf("the git server %s answered HTTP %s", host, m[1])
	}
	what := map[string]string{"checkout": "check out", "init": "prepare the workspace for", "remote": "prepare the workspace for"}[step]
	if what == "" {
		what = "clone"
	}
	if line := r.lastError(out); line != "" {
		return failf("git could not %s %s: %s", what, shown, line)
	}
	return failf("git could not %s %s", what, shown)
}

// unreachableWhy says in a few words why the host was not reached.
func unreachableWhy(out string) string {
	switch {
	case strings.Contains(out, "Could not resolve host"):
		return "its name does not resolve"
	case strings.Contains(out, "Could not resolve proxy"):
		return "the proxy's name does not resolve"
	case strings.Contains(out, "timed out"):
		return "the connection timed out"
	case strings.Contains(out, "Empty reply"), strings.Contains(out, "reset by peer"):
		return "the connection was closed without an answer"
	case strings.Contains(out, "unreachable"), strings.Contains(out, "No route"):
		return "no route to it"
	}
	return "the connection was refused"
}

// absPath is an absolute path in git's text, after a space, a quote or a
// bracket (a URL's path follows its host, and is left alone).
var absPath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s'"(=])/[^\s'"]*`)
})

// lastError is git's last "fatal:" or "error:" line, for a failure of no
// known kind, with no path of the server's in it: the sandbox and the
// workspace read as ".", any other absolute path as "…".
func (r *run) lastError(out string) string {
	var line string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"fatal: ", "error: "} {
			if rest, ok := strings.CutPrefix(l, p); ok && rest != "" {
				line = rest
			}
		}
	}
	if line == "" {
		return ""
	}
	line = strings.ReplaceAll(line, r.j.Source.URL, Shown(r.j.Source.URL))
	for _, d := range []string{r.j.Dir, r.j.Sandbox} {
		if d == "" {
			continue
		}
		dirs := []string{filepath.Clean(d)}
		if real, err := filepath.EvalSymlinks(d); err == nil {
			dirs = append(dirs, real)
		}
		for _, d := range dirs {
			line = strings.ReplaceAll(line, d, ".")
		}
	}
	return absPath().ReplaceAllString(line, "$1…")
}
