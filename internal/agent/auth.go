package agent

import (
	"encoding/json"
	"strings"
)

// AuthMethod is one way of authenticating that the agent offered in its
// answer to initialize. Only the id is kept: it is what names the method in
// the agent's documentation (gemini-api-key, oauth-personal, …), and all of
// it is the agent's own text, so only ids that read as identifiers are.
type AuthMethod struct {
	ID string
}

// Bounds on what an agent's list of methods adds to a message, which must
// leave room for the agent's own words in a sandbox.error.
const (
	maxAuthMethods  = 8
	maxAuthMethodID = 64
	maxOffersText   = 160
)

// parseAuthMethods reads initialize's authMethods leniently, as ACP asks:
// an entry that is not a method is skipped, not an error.
func parseAuthMethods(raw []json.RawMessage) []AuthMethod {
	var out []AuthMethod
	for _, r := range raw {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(r, &m) != nil || !isMethodID(m.ID) {
			continue
		}
		out = append(out, AuthMethod{ID: m.ID})
		if len(out) == maxAuthMethods {
			break
		}
	}
	return out
}

func isMethodID(s string) bool {
	if s == "" || len(s) > maxAuthMethodID {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return false
		}
	}
	return true
}

// AuthError is why Start failed when the agent would not open a session
// for want of credentials: it answered auth_required, or it refused the
// session after offering ways to authenticate. The server cannot log in
// for a sandbox; the remedy is the agent's key in the sandbox's secrets.
type AuthError struct {
	Methods []AuthMethod // what the agent offered, maybe none
	Err     *RPCError    // the agent's answer
}

func (e *AuthError) Error() string {
	if e.Err != nil && e.Err.Code == CodeAuthRequired {
		return NeedsCredentials(e.Methods)
	}
	return "the agent refused to open a session and may lack credentials" + offers(e.Methods) + credentialsRemedy
}

const credentialsRemedy = "; give it its key in the sandbox's secrets, see docs/agents.md"

// NeedsCredentials is the sentence that tells people the agent wants
// credentials, naming the methods it offered.
func NeedsCredentials(methods []AuthMethod) string {
	return "the agent needs credentials" + offers(methods) + credentialsRemedy
}

func offers(methods []AuthMethod) string {
	if len(methods) == 0 {
		return ""
	}
	var b strings.Builder
	for i, m := range methods {
		if i > 0 {
			if b.Len()+len(m.ID) > maxOffersText {
				b.WriteString(", …")
				break
			}
			b.WriteString(", ")
		}
		b.WriteString(m.ID)
	}
	return " (it offers: " + b.String() + ")"
}
