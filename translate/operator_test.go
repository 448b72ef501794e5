package translate

import (
	"slices"
	"testing"
)

func TestOperatorValues(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		want        []string // redacted, beyond nothing
	}{
		// Settings: left alone, whatever the name says.
		{"DEBUG", "1", nil},
		{"GEMINI_CLI_NO_RELAUNCH", "true", nil},
		{"USE_AUTH", "false", nil},
		{"LOG_LEVEL", "info", nil},
		{"ANTHROPIC_MODEL", "claude-sonnet-4-5-20250929", nil},
		{"OPENAI_MODEL", "gpt-4o-mini", nil},
		{"MODEL", "Qwen2.5-Coder-32B", nil},
		{"AWS_REGION", "us-east-1", nil},
		{"ANTHROPIC_BASE_URL", "https://api.anthropic.com/v1", nil},
		{"NO_PROXY", "localhost,127.0.0.1,.internal", nil},
		{"TOOLS", "/opt/tools/bin:/usr/local/bin", nil},
		{"KEYRING_BACKEND", "file", nil},
		// Credentials by their look.
		{"MODEL_KEY", "sk-operator-7Hq2LmZ9pXw4", []string{"sk-operator-7Hq2LmZ9pXw4"}},
		{"UPSTREAM", "Xk9mQ2vLp8Rt", []string{"Xk9mQ2vLp8Rt"}},
		{"SIGNING", "dGhpcyBpcyBhIHNlY3JldA==", []string{"dGhpcyBpcyBhIHNlY3JldA=="}},
		{"HEX", "3f9a2b7c5d1e4f6a", []string{"3f9a2b7c5d1e4f6a"}},
		{"PHRASE", "p4ssw0rd", []string{"p4ssw0rd"}},
		// Credentials by their name, however plain.
		{"GEMINI_API_KEY", "plainword", []string{"plainword"}},
		{"DB_PASSWORD", "hunter", []string{"hunter"}},
		{"ANTHROPIC_AUTH_TOKEN", "test", []string{"test"}},
		{"GITHUB_PAT", "abcdefgh", []string{"abcdefgh"}},
		{"DB_PASSWORD", "abc", nil}, // too short to redact, as a secret would be
		// A URL's credentials, also on their own.
		{"HTTPS_PROXY", "https://agent:Pw9-canary-Z4@proxy.invalid:3128",
			[]string{"Pw9-canary-Z4", "agent:Pw9-canary-Z4", "https://agent:Pw9-canary-Z4@proxy.invalid:3128"}},
		{"HTTPS_PROXY", "http://op:p%40ss-word@proxy.invalid/a@b",
			[]string{"http://op:p%40ss-word@proxy.invalid/a@b", "op:p%40ss-word", "p%40ss-word", "p@ss-word"}},
		{"GIT_URL", "https://ghp1Xy7Qm3Rz9Lk2Wv5Tn8@github.com/o/r.git",
			[]string{"ghp1Xy7Qm3Rz9Lk2Wv5Tn8", "https://ghp1Xy7Qm3Rz9Lk2Wv5Tn8@github.com/o/r.git"}},
		{"SEARCH_URL", "https://search.invalid/q?api_key=plainkey&lang=en",
			[]string{"plainkey"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := OperatorValues(map[string]string{tt.name: tt.value})
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("OperatorValues(%s=%q) = %q, want %q", tt.name, tt.value, got, want)
			}
		})
	}
}

// TestOperatorValuesRedacted checks the rule where it matters: in a
// Translator's strings, the credentials go and the settings stay.
func TestOperatorValuesRedacted(t *testing.T) {
	vals := OperatorValues(map[string]string{
		"MODEL_KEY":   "sk-op-7Hq2",
		"HTTPS_PROXY": "https://agent:Pw9-canary-Z4@proxy.invalid:3128",
		"MODEL":       "claude-sonnet-4-5",
		"VERBOSE":     "true",
	})
	tr := New(Config{Secrets: vals})
	in := "model claude-sonnet-4-5 (verbose true) with key sk-op-7Hq2 via https://agent:Pw9-canary-Z4@proxy.invalid:3128; password Pw9-canary-Z4"
	want := "model claude-sonnet-4-5 (verbose true) with key " + Redacted + " via " + Redacted + "; password " + Redacted
	if got := tr.redact(in); got != want {
		t.Fatalf("redact(%q)\n= %q\nwant %q", in, got, want)
	}
}
