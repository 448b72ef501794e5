package translate

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Redacted is what a secret or a credential-shaped token becomes.
const Redacted = "[REDACTED]"

// MinSecretLen is the shortest sandbox secret value that is redacted.
const MinSecretLen = 4

// tokenRE matches the common credential shapes. Each alternative has a twin
// in shapes below, which the streaming hold-back uses to tell whether the end
// of an open part could still grow into a match.
//
// It is compiled at its first use, as every pattern of the binary's own
// is: one compiled at package init costs every start of the binary (the
// server, each CLI call, and the two processes of the confinement probe),
// about 7 ms of CPU for them all (BENCHMARKS.md, peer).
var tokenRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(strings.Join([]string{
		`\bsk-[A-Za-z0-9_-]{16,}`,                                      // OpenAI, Anthropic (sk-ant-…)
		`\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}`,                       // Stripe
		`\bgh[oprsu]_[A-Za-z0-9]{20,}`,                                 // GitHub
		`\bgithub_pat_[A-Za-z0-9_]{20,}`,                               // GitHub fine-grained
		`\bglpat-[A-Za-z0-9_-]{20,}`,                                   // GitLab
		`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`,                                // AWS access key id
		`\bAIza[0-9A-Za-z_-]{30,}`,                                     // Google API key
		`\bxox[abeprs]-[A-Za-z0-9-]{10,}`,                              // Slack
		`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`, // JWT
		`\bspk_[A-Za-z0-9_-]{16,}`,                                     // Sparkles server token
		`\bst_c_[0-9a-z]{20,}\.[A-Za-z0-9_-]{16,}`,                     // Sparkles stream token
		// A private key block; without its END line it runs to the end of the
		// text, so a truncated key is still covered.
		`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)`,
	}, "|"))
})

// tokenMarkers are literals at least one of which occurs in any tokenRE
// match; text without any of them skips the regular expression.
var tokenMarkers = []string{
	"sk-", "k_live_", "k_test_", "gho_", "ghp_", "ghr_", "ghs_", "ghu_", "github_pat_", "glpat-", "AKIA", "ASIA", "AIza", "xox", "eyJ", "-----BEGIN", "spk_", "st_c_",
}

// bearerRE matches an Authorization-style bearer token; group 2 is the
// token, the only part replaced, so the text still reads "Bearer [REDACTED]".
var bearerRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b(bearer[ \t]+)([A-Za-z0-9._~+/=-]{12,})`)
})

var pemEndRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`-----END[A-Z0-9 ]*-----`)
})

// shape is a token shape as the hold-back sees it: literal markers that
// start it, followed by any number of body characters.
type shape struct {
	markers []string
	body    func(c byte) bool
}

var shapes = []shape{
	{[]string{"sk-"}, isKeyChar},
	{[]string{"sk_live_", "sk_test_", "rk_live_", "rk_test_"}, isAlnum},
	{[]string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, isAlnum},
	{[]string{"github_pat_"}, isWordChar},
	{[]string{"glpat-"}, isKeyChar},
	{[]string{"AKIA", "ASIA"}, func(c byte) bool { return isDigit(c) || 'A' <= c && c <= 'Z' }},
	{[]string{"AIza"}, isKeyChar},
	{[]string{"xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-"}, func(c byte) bool { return isAlnum(c) || c == '-' }},
	{[]string{"eyJ"}, func(c byte) bool { return isKeyChar(c) || c == '.' }},
	{[]string{"spk_"}, isKeyChar},
	{[]string{"st_c_"}, func(c byte) bool { return isKeyChar(c) || c == '.' }},
}

func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool    { return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isWordChar(c byte) bool { return isAlnum(c) || c == '_' }
func isKeyChar(c byte) bool  { return isWordChar(c) || c == '-' }

// isRunChar is the union of every token body and of bearer token characters.
func isRunChar(c byte) bool { return isKeyChar(c) || strings.IndexByte("._~+/=", c) >= 0 }

// wordStart reports whether a \b holds before s[p] for a marker that starts
// with a word character, as RE2's ASCII \b decides it.
func wordStart(s string, p int) bool { return p == 0 || !isWordChar(s[p-1]) }

// redactor replaces sandbox secrets and token shapes in outgoing strings,
// and rewrites the absolute paths of the sandbox and the data directory.
type redactor struct {
	secrets []string // longest first, so the longest of overlapping secrets is held back
	paths   pathRoots
}

// region is a byte range of a text and what replaces it: Redacted for a
// secret or a token, a path's rewrite otherwise.
type region struct {
	a, b   int
	repl   string
	redact bool
}

func newRedactor(secrets []string, paths pathRoots) *redactor {
	r := &redactor{paths: paths}
	seen := map[string]bool{}
	for _, s := range secrets {
		// Secrets arrive through JSON and agent text is decoded from JSON,
		// so both are valid UTF-8; normalising keeps a cut at a secret's
		// prefix on a rune boundary even for a malformed value.
		s = strings.ToValidUTF8(s, "\uFFFD")
		if len(s) < MinSecretLen || seen[s] {
			continue
		}
		seen[s] = true
		r.secrets = append(r.secrets, s)
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return r
}

// String returns s redacted and the number of regions replaced.
func (r *redactor) String(s string) (string, int) { return r.scrub(s, len(s)) }

// scrub returns the redaction of s cut at cut, and the number of regions
// redacted (path rewrites are not counted). A cut inside a region moves back
// to the region's start, so no piece of a secret or of a path is ever shown
// as the prefix of a snapshot.
func (r *redactor) scrub(s string, cut int) (string, int) {
	regions := r.regions(s)
	for _, g := range regions {
		if g.a < cut && cut < g.b {
			cut = g.a
			break
		}
	}
	if len(regions) == 0 {
		return s[:cut], 0
	}
	var b strings.Builder
	b.Grow(cut)
	prev, n := 0, 0
	for _, g := range regions {
		if g.a >= cut {
			break
		}
		b.WriteString(s[prev:g.a])
		b.WriteString(g.repl)
		prev = g.b
		if g.redact {
			n++
		}
	}
	b.WriteString(s[prev:cut])
	return b.String(), n
}

// regions returns the byte ranges of s to replace, sorted and merged: every
// occurrence of every secret, every token shape, every bearer token, and the
// paths under the roots. A path that overlaps a secret is redacted whole.
func (r *redactor) regions(s string) []region {
	rs := r.secretRegions(s)
	n := len(rs)
	rs = r.paths.regions(s, rs)
	if len(rs) == n || n == 0 {
		return rs
	}
	slices.SortStableFunc(rs, func(x, y region) int { return cmp.Compare(x.a, y.a) })
	out := rs[:1]
	for _, g := range rs[1:] {
		if last := &out[len(out)-1]; g.a < last.b {
			last.b = max(last.b, g.b)
			if g.redact && !last.redact {
				last.redact, last.repl = true, Redacted
			}
		} else {
			out = append(out, g)
		}
	}
	return out
}

// secretRegions returns the regions of s to redact, sorted and merged.
func (r *redactor) secretRegions(s string) []region {
	var rs [][2]int
	for _, sec := range r.secrets {
		for i := 0; i < len(s); {
			j := strings.Index(s[i:], sec)
			if j < 0 {
				break
			}
			a, b := i+j, i+j+len(sec)
			// Overlapping occurrences ("aaaaa" of "aaaa") merge into one.
			if n := len(rs); n > 0 && rs[n-1][1] >= a && rs[n-1][0] <= a {
				rs[n-1][1] = max(rs[n-1][1], b)
			} else {
				rs = append(rs, [2]int{a, b})
			}
			i = a + 1
		}
	}
	if hasAny(s, tokenMarkers) {
		for _, m := range tokenRE().FindAllStringIndex(s, -1) {
			rs = append(rs, [2]int{m[0], m[1]})
		}
	}
	if indexFold(s, "bearer") >= 0 {
		for _, m := range bearerRE().FindAllStringSubmatchIndex(s, -1) {
			if looksLikeToken(s[m[4]:m[5]]) {
				rs = append(rs, [2]int{m[4], m[5]})
			}
		}
	}
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	out := []region{{a: rs[0][0], b: rs[0][1], repl: Redacted, redact: true}}
	for _, g := range rs[1:] {
		if last := &out[len(out)-1]; g[0] <= last.b {
			last.b = max(last.b, g[1])
		} else {
			out = append(out, region{a: g[0], b: g[1], repl: Redacted, redact: true})
		}
	}
	return out
}

// looksLikeToken keeps "Bearer responsibilities" readable: a bearer
// credential has a digit or punctuation, or is long.
func looksLikeToken(tok string) bool {
	return len(tok) >= 24 || strings.ContainsAny(tok, "0123456789._~+/=")
}

// hold returns where the end of an open part's text could still be the start
// of a secret, a token or a path to rewrite: the snapshot of an open part
// stops there, and the rest waits for more text or for the part to close.
func (r *redactor) hold(s string) int {
	cut := len(s)
	for _, sec := range r.secrets {
		// The longest suffix of s that is a proper prefix of sec starts
		// earliest; only starts before cut can lower it.
		for k := min(len(sec)-1, len(s)); k > len(s)-cut; k-- {
			if s[len(s)-k] == sec[0] && strings.HasSuffix(s, sec[:k]) {
				cut = len(s) - k
				break
			}
		}
	}
	run := len(s)
	for run > 0 && isRunChar(s[run-1]) {
		run--
	}
	for _, sh := range shapes {
		q := len(s) // start of the longest suffix of body characters
		for q > run && sh.body(s[q-1]) {
			q--
		}
		for _, m := range sh.markers {
			// A whole marker followed by body characters to the end.
			for i := max(run, q-len(m)); i < cut; {
				j := strings.Index(s[i:], m)
				if j < 0 || i+j >= cut {
					break
				}
				if p := i + j; wordStart(s, p) {
					cut = p
					break
				}
				i += j + 1
			}
			// A proper prefix of a marker at the very end.
			for k := min(len(m)-1, len(s)-run); k > 0; k-- {
				if p := len(s) - k; p < cut && s[p:] == m[:k] && wordStart(s, p) {
					cut = p
					break
				}
			}
		}
	}
	// "Bea", "bearer", or "Bearer " with a token still growing.
	for k := min(len("bearer"), len(s)-run); k > 0; k-- {
		if p := len(s) - k; p < cut && strings.EqualFold(s[p:], "bearer"[:k]) && wordStart(s, p) {
			cut = p
			break
		}
	}
	sp := run
	for sp > 0 && (s[sp-1] == ' ' || s[sp-1] == '\t') {
		sp--
	}
	if p := sp - len("bearer"); sp < run && p >= 0 && p < cut && strings.EqualFold(s[p:sp], "bearer") && wordStart(s, p) {
		cut = p
	}
	// A key block still open, or the start of its BEGIN line.
	if p := strings.LastIndex(s, "-----BEGIN"); p >= 0 && p < cut && !pemEndRE().MatchString(s[p:]) {
		cut = p
	}
	const begin = "-----BEGIN"
	for k := min(len(begin)-1, len(s)); k > 0; k-- {
		if p := len(s) - k; p < cut && s[p:] == begin[:k] {
			cut = p
			break
		}
	}
	cut = min(cut, r.paths.hold(s))
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

func hasAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// indexFold is strings.Index for an ASCII lower-case needle, ignoring ASCII
// case, without allocating a lowered copy of s.
func indexFold(s, lower string) int {
	for i := 0; i+len(lower) <= len(s); i++ {
		if s[i]|0x20 != lower[0] {
			continue
		}
		j := 1
		for j < len(lower) && s[i+j]|0x20 == lower[j] {
			j++
		}
		if j == len(lower) {
			return i
		}
	}
	return -1
}

// NewRedactor returns the redaction of whole strings that every outgoing
// string gets (secrets of at least MinSecretLen bytes and credential
// shapes), for strings that do not come from the agent, such as a sandbox's
// metadata.
func NewRedactor(secrets []string) func(string) string {
	r := newRedactor(secrets, pathRoots{})
	return func(s string) string {
		out, _ := r.String(s)
		return out
	}
}
