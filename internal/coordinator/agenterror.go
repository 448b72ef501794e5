package coordinator

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

const (
	// maxAgentText bounds the agent's words in a sandbox.error (docs/errors.md).
	maxAgentText = 500
	// maxStatusDetail bounds a status_detail that carries some of them.
	maxStatusDetail = 1000
)

// promptError is what a turn tells of the error the agent answered its
// prompt with: the agent's text, sanitized, and when the agent says it
// lacks credentials, which ones it offered and where they go.
func (b *box) promptError(e *agent.RPCError) string {
	text := strings.TrimSpace(e.Message)
	if d := dataText(e.Data); d != "" && !strings.Contains(text, d) {
		if text != "" {
			text += ": "
		}
		text += d
	}
	if text == "" {
		text = "the agent answered the prompt with an error and no message"
	}
	if e.Code != agent.CodeAuthRequired {
		return b.sanitize(text, maxAgentText)
	}
	var methods []agent.AuthMethod
	if b.conn != nil {
		methods = b.conn.AuthMethods()
	}
	hint := "; " + agent.NeedsCredentials(methods)
	return b.sanitize(text, maxAgentText-len(hint)) + hint
}

// dataText finds the human message in an error's data, where the ACP SDKs
// put the cause: a string (Rust SDK), {"details": "…"} (TypeScript SDK), or
// the JSON of an API error such as {"error": {"message": "…"}}.
func dataText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(raw, &o) != nil {
		return ""
	}
	for _, k := range []string{"details", "message", "error"} {
		if json.Unmarshal(o[k], &s) == nil && strings.TrimSpace(s) != "" {
			return strings.TrimSpace(s)
		}
	}
	var nested struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(o["error"], &nested) == nil {
		return strings.TrimSpace(nested.Message)
	}
	return ""
}

// sanitize makes the agent's text fit to leave the server: redacted as every
// string is, the sandbox's paths relative and every other absolute path
// gone, on one line, at most n bytes. Redaction comes first so that the cut
// can never leave the start of a secret the redactor no longer recognizes.
func (b *box) sanitize(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if b.tr != nil {
		s = b.tr.RedactInput([]sandbox.Input{{Type: "text", Text: s}})[0].Text
	}
	for _, dir := range b.workDirs() {
		s = relativize(s, dir)
	}
	s = hidePaths(s)
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	return cut(s, n)
}

// workDirs are the spellings of the sandbox's work directory an agent may
// print: the one it was given, and the one its symlinks resolve to.
func (b *box) workDirs() []string {
	dir, err := filepath.Abs(b.dir().Work())
	if err != nil {
		return nil
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		dirs = append(dirs, real)
	}
	return dirs
}

// relativize rewrites dir/x as x and dir itself as ".".
func relativize(s, dir string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, dir)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		j := i + len(dir)
		switch {
		case j < len(s) && s[j] == '/':
			out.WriteString(s[:i])
			j++
		case j == len(s) || !isPathByte(s[j]):
			out.WriteString(s[:i] + ".")
		default: // a longer name that starts alike: not the sandbox
			out.WriteString(s[:j])
		}
		s = s[j:]
	}
}

func isPathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-~+@", c) >= 0
}

// absPathRE matches an absolute path of two components or more where a
// word may start (after a space, a quote, a bracket, "=" or ":"). One
// component is left alone, as "/login" in "run /login" is a command, and so
// are URLs, whose "//" never starts a component.
var absPathRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s"'` + "`" + `(\[{<=:,;])(/[^\s/"'` + "`" + `()\[\]{}<>,;]+(?:/[^\s"'` + "`" + `()\[\]{}<>,;]*)+)`)
})

func hidePaths(s string) string { return absPathRE().ReplaceAllString(s, "${1}[path]") }

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	if n < len(mark) {
		return ""
	}
	n -= len(mark)
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + mark
}

// agentError returns the sandbox.error of an error the agent answered a
// prompt with. translate.Error files codes it does not list under internal,
// and agent_error came after its list; the code is set here so that the
// event says what the turn.completed says.
func (b *box) agentError(msg string) []*sandbox.Event {
	evs := b.tr.Error(sandbox.ErrAgent, msg)
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			d.Code = sandbox.ErrAgent
		}
	}
	return evs
}
