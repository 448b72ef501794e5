package translate

import (
	"net/url"
	"slices"
	"strings"
)

// OperatorValues returns the values of env, an agent's variables from the
// operator (the registry's env and the pass_env variables of the server's
// environment), that are redacted as sandbox secrets are. The operator
// mixes credentials (a model key, a proxy URL with its password) with
// settings (a model name, a log level, "1"), and redacting a setting
// would blank ordinary words wherever the agent wrote them, "true" or
// "claude-sonnet-4-5" in every message. So, per variable:
//
//   - a value shorter than MinSecretLen or a yes/no word ("true", "off")
//     is never redacted: it carries no credential;
//   - a value whose variable's name says it is a credential (a word of
//     the name, split at '_', is KEY, TOKEN, SECRET, PASSWORD, AUTH… see
//     credentialWords) is redacted whatever it looks like;
//   - any other value is redacted unless it is plain (see plain): words
//     and numbers joined by punctuation, as a model name, a region, a
//     path or a URL without credentials are;
//   - a URL's user, password and query values are also redacted on their
//     own, as they may be printed apart from the URL (a password always,
//     the user and each query value by the rules above, the query key as
//     the name).
//
// A value that is both a credential and plain under a name that does not
// say so ("correct-horse-battery" in PROXY_PHRASE) is not redacted: docs/security.md
// tells operators to name such variables for what they hold, or to
// give the value as a sandbox secret.
func OperatorValues(env map[string]string) []string {
	var out []string
	for name, v := range env {
		out = appendOperatorValue(out, name, v)
		if strings.Contains(v, "://") {
			out = appendURLParts(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func appendOperatorValue(out []string, name, v string) []string {
	if len(v) < MinSecretLen || isYesNo(v) {
		return out
	}
	if credentialName(name) || !plain(v) {
		out = append(out, v)
	}
	return out
}

// appendURLParts adds the parts of a URL that carry credentials, decoded
// and as written.
func appendURLParts(out []string, v string) []string {
	u, err := url.Parse(v)
	if err != nil {
		return out
	}
	if u.User != nil {
		// The user info as written: the authority ends at the first of
		// "/?#", and the user info at its last '@'.
		raw := v[strings.Index(v, "://")+3:]
		if end := strings.IndexAny(raw, "/?#"); end >= 0 {
			raw = raw[:end]
		}
		raw = raw[:max(strings.LastIndexByte(raw, '@'), 0)]
		rawUser, rawPass, _ := strings.Cut(raw, ":")
		if p, ok := u.User.Password(); ok && len(p) >= MinSecretLen {
			out = append(out, p, rawPass, raw)
		}
		out = appendOperatorValue(out, "", u.User.Username())
		out = appendOperatorValue(out, "", rawUser)
	}
	for key, vals := range u.Query() {
		for _, q := range vals {
			out = appendOperatorValue(out, key, q)
		}
	}
	return out
}

// credentialWords are the words of a variable's name that say it holds a
// credential: GEMINI_API_KEY, ANTHROPIC_AUTH_TOKEN, DB_PASSWORD. Whole
// words, so that KEYRING_BACKEND or PASSTHROUGH are settings.
var credentialWords = []string{
	"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "PW",
	"PAT", "AUTH", "CREDENTIAL", "CREDENTIALS", "CREDS", "PRIVATE", "COOKIE",
	"SESSION", "SIG", "SIGNATURE", "SALT",
}

func credentialName(name string) bool {
	for w := range strings.SplitSeq(strings.ToUpper(name), "_") {
		if slices.Contains(credentialWords, w) {
			return true
		}
	}
	return false
}

func isYesNo(v string) bool {
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off":
		return true
	}
	return false
}

// plain reports whether v is made of words and numbers joined by
// punctuation (- . _ / : , ? = & and space), as settings are and generated
// credentials are not: each word is letters in one case (or capitalized)
// and digits, with at most one switch between them ("claude", "v1", "4o",
// "qwen2", "32B", "20250929"). A key mixes letters and digits, or cases,
// again and again ("sk-ant-api03-Xy7Qm…", "hunter2-P4ss").
func plain(v string) bool {
	for i := 0; i < len(v); {
		c := v[i]
		if strings.IndexByte("-._/:,?=& ", c) >= 0 {
			i++
			continue
		}
		j := i
		for j < len(v) && isAlnum(v[j]) {
			j++
		}
		if j == i || !plainWord(v[i:j]) {
			return false
		}
		i = j
	}
	return true
}

func plainWord(w string) bool {
	switches := 0
	for i := 1; i < len(w); i++ {
		if isDigit(w[i]) != isDigit(w[i-1]) {
			switches++
		}
	}
	if switches > 1 {
		return false
	}
	var letters []byte
	for i := 0; i < len(w); i++ {
		if !isDigit(w[i]) {
			letters = append(letters, w[i])
		}
	}
	if len(letters) == 0 {
		return true
	}
	l := string(letters)
	lower, upper := strings.ToLower(l), strings.ToUpper(l)
	return l == lower || l == upper || l[:1] == upper[:1] && l[1:] == lower[1:]
}
