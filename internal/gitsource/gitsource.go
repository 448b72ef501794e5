// Package gitsource fills a sandbox's workspace from a git repository
// before its agent boots (docs/workspace.md): git, found on the server's PATH, run
// through the agent's launcher, so that a hostile repository or server
// meets the same confinement a hostile agent does, and the clone's files
// are owned as the agent's own.
//
// What git is given, and why:
//
//   - only https and http (protocol.allow): file://, ext:: and ssh would
//     reach the server's disk, run commands or need keys it does not have;
//   - no system or global configuration (GIT_CONFIG_NOSYSTEM,
//     GIT_CONFIG_GLOBAL=/dev/null, HOME in the sandbox), no hooks
//     (core.hooksPath=/dev/null), no submodules, no prompts
//     (GIT_TERMINAL_PROMPT=0), and an environment of its own (the agent's
//     GIT_* variables and secrets never reach it);
//   - the credential (secrets.GIT_TOKEN) as an HTTP header scoped to the
//     repository's origin, through GIT_CONFIG_COUNT in the environment,
//     as actions/checkout hands a token to git: never in argv, where any
//     process of the machine reads it, never in the URL, which git writes
//     to .git/config and the sandbox resource answers. Clone checks after
//     the fact that .git/config holds none of it;
//   - messages in English (LC_ALL=C), so that a failure can be told apart
//     by git's words. A Failure says which in the project's own words;
//     git's output goes only to the log, with the credential redacted.
package gitsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Limits of a source given at create.
const (
	MaxDepth  = 1_000_000
	maxURLLen = 2048
	maxRefLen = 255
)

// Check validates a git source given at create. Its errors are
// invalid_request, written for the person who sent it.
func Check(src sandbox.GitSource) error {
	if src.URL == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, `source.git.url is required: the repository's https URL`)
	}
	if len(src.URL) > maxURLLen {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url is longer than %d bytes", maxURLLen)
	}
	if strings.IndexFunc(src.URL, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0 {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url holds a space or a control character")
	}
	scheme, _, _ := strings.Cut(strings.ToLower(src.URL), "://")
	if scheme != "https" && scheme != "http" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url: want an https or http URL (git over ssh, git:// and local paths are not served)")
	}
	u, err := url.Parse(src.URL)
	if err != nil {
		// Its text is never echoed: it may hold a credential.
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url is not a valid URL")
	}
	if u.User != nil {
		// Its text is never echoed: it may be the credential itself.
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url holds a user name or password; put the token in secrets.GIT_TOKEN instead, which is never stored or shown")
	}
	if u.Host == "" || u.Hostname() == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url has no host")
	}
	if u.RawQuery != "" || u.ForceQuery {
		// git appends /info/refs?service=… to the URL, so a query would
		// break it; and a query is where a credential would hide.
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url has a query string, which git cannot use; a token goes in secrets.GIT_TOKEN")
	}
	if u.Fragment != "" || strings.Contains(src.URL, "#") {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.url has a fragment; give the branch, tag or commit in source.git.ref")
	}
	if err := checkRef(src.Ref); err != nil {
		return err
	}
	if src.Depth < 0 || src.Depth > MaxDepth {
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.depth %d: want 0 (the whole history) to %d", src.Depth, MaxDepth)
	}
	return nil
}

// checkRef accepts a branch, a tag, a commit or a full ref name: no option
// (leading '-'), no refspec (':', leading '+'), and nothing git's own
// check-ref-format refuses that could mean something else to git.
func checkRef(ref string) error {
	switch {
	case ref == "":
		return nil
	case len(ref) > maxRefLen:
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.ref is longer than %d bytes", maxRefLen)
	case strings.HasPrefix(ref, "-"), strings.HasPrefix(ref, "+"):
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.ref %q starts with %q: want a branch, a tag or a commit", ref, ref[:1])
	case strings.IndexFunc(ref, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0,
		strings.ContainsAny(ref, `:~^?*[\`), strings.Contains(ref, ".."), strings.Contains(ref, "@{"),
		strings.HasSuffix(ref, "/"), strings.HasSuffix(ref, "."), strings.HasSuffix(ref, ".lock"):
		return sandbox.Errorf(sandbox.EInvalidRequest, "source.git.ref %q is not a valid branch, tag or commit name", ref)
	}
	return nil
}

// Shown is url as it may be shown in a status detail, an event or a log:
// without user info, query or fragment (for a URL Check refused, the most
// of it that carries no credential). Unparsable text is not shown at all.
func Shown(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" && u.Host == "" {
		return "the repository"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Job is one clone: where from, where to, and how git runs.
type Job struct {
	Source sandbox.GitSource
	// Dir is the workspace: it exists and is empty.
	Dir string
	// Token is the sandbox's secrets.GIT_TOKEN; "" for a public repository.
	Token string
	// Env is the base environment the agent would get. git keeps only
	// PATH, proxies and CA settings of it.
	Env []string
	// Launcher is the agents' launcher; nil runs git unconfined, as the
	// agents are with isolation off.
	Launcher agent.Launcher
	// Sandbox is the sandbox directory the launcher confines to (work,
	// home and tmp under it).
	Sandbox string
	// Confinement is what the agent's registry entry adds; git's network
	// is open whatever it says.
	Confinement agent.Confinement
	// Progress, when set, is told each step for sandbox.status:
	// "cloning <url>", then "checking out <ref>".
	Progress func(detail string)
	Log      *slog.Logger
}

// Failure is a clone that failed for a reason of the source's (unreachable,
// refused credential, no such repository or ref, too slow): sandbox.error
// source_failed. Message is written for people and safe to show: no
// credential, no path of the server's, at most maxMessage bytes.
type Failure struct{ Message string }

func (f *Failure) Error() string { return f.Message }

// Clone clones j.Source into j.Dir. Its error is a *Failure, whatever made
// the clone fail (the source, or a server that cannot run git), except
// when ctx was canceled: then ctx's error. A deadline that passed is a
// Failure ("did not finish in time"). A failed clone may leave part of
// the repository in j.Dir.
func Clone(ctx context.Context, j Job) error {
	if err := Check(j.Source); err != nil {
		var e *sandbox.Error
		errors.As(err, &e)
		return &Failure{Message: cut(e.Message)}
	}
	if j.Log == nil {
		j.Log = slog.New(slog.DiscardHandler)
	}
	if j.Progress == nil {
		j.Progress = func(string) {}
	}
	r, err := newRun(j)
	if err != nil {
		return err
	}
	shown := Shown(j.Source.URL)
	j.Log.Info("git source: cloning", "url", shown, "ref", j.Source.Ref, "depth", j.Source.Depth, "token", j.Token != "")
	j.Progress("cloning " + shown)
	fetch, checkout := r.steps()
	empty := false
	for _, args := range fetch {
		out, err := r.git(ctx, args)
		if err != nil {
			return err
		}
		// An empty repository is a workspace with an empty .git: there
		// is nothing to check out.
		empty = empty || strings.Contains(out, "cloned an empty repository")
	}
	if !empty {
		j.Progress("checking out " + r.checkoutName())
		if _, err := r.git(ctx, checkout); err != nil {
			return err
		}
	}
	if err := r.verify(); err != nil {
		return err
	}
	j.Log.Info("git source: cloned", "url", shown, "ref", j.Source.Ref)
	return nil
}

// maxMessage bounds a Failure's message, as the status detail it becomes.
const maxMessage = 300

// cut bounds s to maxMessage bytes, on a rune boundary.
func cut(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	n := maxMessage - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// hostOf names the repository's host (with its port) for messages.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the git server"
	}
	return u.Host
}

// failf makes a Failure, its text bounded.
func failf(format string, args ...any) *Failure {
	return &Failure{Message: cut(fmt.Sprintf(format, args...))}
}
