package translate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

const pemKey = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----"

func TestRedact(t *testing.T) {
	r := newRedactor([]string{testSecret, "abc", "", "p@ss w0rd", "p@ss"}, pathRoots{})
	for _, tt := range []struct {
		name, in, want string
		n              int
	}{
		{"Secret", "x " + testSecret + " y", "x [REDACTED] y", 1},
		{"SecretTwice", testSecret + testSecret, "[REDACTED]", 1},
		{"SecretWithSpace", "use p@ss w0rd now", "use [REDACTED] now", 1},
		{"ShorterSecretToo", "use p@ss now", "use [REDACTED] now", 1},
		{"ShortSecretIgnored", "abc def", "abc def", 0},
		{"OpenAI", "key=sk-proj-Ab3dEfGhIjKlMnOpQrStUv done", "key=[REDACTED] done", 1},
		{"Anthropic", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123456789-AA", "[REDACTED]", 1},
		{"GitHub", "token ghp_abcdefghijklmnopqrstuvwxyz0123456789.", "token [REDACTED].", 1},
		{"GitHubPAT", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[REDACTED]", 1},
		{"AWS", "AKIAIOSFODNN7EXAMPLE and ASIAIOSFODNN7EXAMPLE", "[REDACTED] and [REDACTED]", 2},
		{"SparklesTokens", "server spk_AbCdEfGhIjKlMnOpQrSt stream st_c_01m8rfc0kf6kxhnc3d6nzv370p.AbCdEfGhIjKlMnOpQrStUv", "server [REDACTED] stream [REDACTED]", 2},
		{"SparklesWordsNotTokens", "spk_short st_c_abc", "spk_short st_c_abc", 0},
		{"Slack", "xoxb-123456789012-abcdefghijkl", "[REDACTED]", 1},
		{"Google", "AIzaSyA-abcdefghijklmnopqrstuvwxyz012345", "[REDACTED]", 1},
		{"Stripe", "sk_live_abcdefghijklmnop1234", "[REDACTED]", 1},
		{"GitLab", "glpat-abcdefghij0123456789", "[REDACTED]", 1},
		{"JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "[REDACTED]", 1},
		{"Bearer", "Authorization: Bearer abc.def-123_XYZ", "Authorization: Bearer [REDACTED]", 1},
		{"BearerLowerCase", "authorization: bearer 0123456789abcdef", "authorization: bearer [REDACTED]", 1},
		{"BearerSlackToken", "Bearer xoxb-123456789012-abcdefghijkl", "Bearer [REDACTED]", 1},
		{"PrivateKey", "key:\n" + pemKey + "\nend", "key:\n[REDACTED]\nend", 1},
		{"PrivateKeyTruncated", "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA", "key:\n[REDACTED]", 1},
		{"Overlapping", "sk-" + testSecret + "-abcdefgh", "[REDACTED]", 1},
		{"NotTaskForce", "task-force-abcdefghijklmnopqrstu", "task-force-abcdefghijklmnopqrstu", 0},
		{"NotRisk", "risk-assessment-and-mitigation-plan", "risk-assessment-and-mitigation-plan", 0},
		{"NotBearerProse", "the bearer responsibilities", "the bearer responsibilities", 0},
		{"NotShortSk", "sk-short", "sk-short", 0},
		{"NotCertificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", 0},
		{"Empty", "", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, n := r.String(tt.in)
			if got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if n != tt.n {
				t.Fatalf("String(%q) replaced %d, want %d", tt.in, n, tt.n)
			}
		})
	}
}

func TestHold(t *testing.T) {
	r := newRedactor([]string{testSecret}, pathRoots{})
	for _, tt := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"ends with hunt", "ends with "},
		{"ends with hunter2-super", "ends with "},
		{"hunted down", "hunted down"},
		{"key sk", "key "},
		{"key sk-ab", "key "},
		{"key=sk-abcdefghijklmnopqrstuvwxyz", "key="},
		{"key sk-abcdefghijklmnopqrstuvwxyz ", "key sk-abcdefghijklmnopqrstuvwxyz "},
		{"desk", "desk"},
		{"a ghp_abc", "a "},
		{"a github_pa", "a "},
		{"an AKIA0123", "an "},
		{"token spk_AbCd", "token "},
		{"stream st_c_01m8.Ab", "stream "},
		{"auth: Bearer", "auth: "},
		{"auth: Bearer ", "auth: "},
		{"auth: Bearer abc.12", "auth: "},
		{"auth: Bearer abc.123 and", "auth: Bearer abc.123 and"},
		{"k\n--", "k\n"},
		{"k\n-----BEGIN RSA PRIVATE KEY-----\nMIIE", "k\n"},
		{"k\n-----BEGIN CERTIFICATE-----\nMIIE\n-----END CERTIFICATE-----\nok", "k\n-----BEGIN CERTIFICATE-----\nMIIE\n-----END CERTIFICATE-----\nok"},
		{"x eyJhbGciOiJIUzI1NiJ9.eyJz", "x "},
		{"über h", "über "},
	} {
		if got := tt.in[:r.hold(tt.in)]; got != tt.want {
			t.Fatalf("hold(%q) keeps %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestStreamedSecretsNeverShow streams texts holding a secret and tokens,
// split at random places, and checks every snapshot: no part of a secret
// or token shows before the whole is redacted, and every snapshot is a
// prefix of the final text.
func TestStreamedSecretsNeverShow(t *testing.T) {
	const secret = "S3cr3tV4lu3Qq"
	texts := []string{
		"the value is " + secret + ", done.",
		"key=sk-ant-api03-ZZZZZZZZZZZZZZZZZZZZZZZZ and more",
		"auth: Bearer ZZZ.ZZZ.ZZZ.999 ok",
		"token ghp_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ!",
		"aws AKIAZZZZZZZZZZZZZZZZ then",
		"slack xoxb-999999999999-ZZZZZZZZZZZZ.",
		"pem\n-----BEGIN RSA PRIVATE KEY-----\nZZZZ\nZZZZ\n-----END RSA PRIVATE KEY-----\nafter",
		secret + secret + " twice",
	}
	// Each text's secret material is made of characters the rest of the
	// text does not use, so a leak is any of them in a snapshot.
	leaky := func(s string) bool {
		return strings.ContainsAny(s, "SZ9") || strings.Contains(s, "BEGIN")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range texts {
		for trial := range 100 {
			c := &clock{t: epoch}
			tr := New(Config{Now: c.Now, Secrets: []string{secret}, FlushInterval: 1})
			tr.StartTurn("turn_1", nil)
			var snaps []string
			collect := func(evs []*sandbox.Event) {
				for _, ev := range evs {
					if d, ok := ev.Data.(*sandbox.MessageUpdated); ok {
						snaps = append(snaps, d.Text)
					}
				}
			}
			for rest := text; rest != ""; {
				n := 1 + rng.IntN(4)
				if trial == 0 {
					n = 1 // one byte at a time
				}
				n = min(n, len(rest))
				c.t = c.t.Add(1)
				collect(tr.Update(json.RawMessage(fmt.Sprintf(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}`, rest[:n]))))
				rest = rest[n:]
			}
			collect(tr.EndTurn(TurnResult{StopReason: "end_turn"}))
			final := snaps[len(snaps)-1]
			if leaky(final) || !strings.Contains(final, Redacted) {
				t.Fatalf("final text of %q = %q", text, final)
			}
			for _, s := range snaps {
				if leaky(s) {
					t.Fatalf("streaming %q showed %q", text, s)
				}
				if !strings.HasPrefix(final, s) {
					t.Fatalf("streaming %q showed %q, not a prefix of the final %q", text, s, final)
				}
			}
		}
	}
}
