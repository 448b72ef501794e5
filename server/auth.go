package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// access says who may call a route.
type access int

const (
	// accessFull routes take the server token only.
	accessFull access = iota
	// accessRead routes read one sandbox: the server token or that
	// sandbox's stream token.
	accessRead
)

// principal is who a request's bearer token speaks for: the server's owner,
// or a reader of one sandbox.
type principal struct {
	sandboxID string // set for a stream token
}

const streamTokenPrefix = "st_"

// StreamToken returns the read-only token of one sandbox. It is derived from
// the server token, so it needs no storage, survives restarts, and every
// stream token ends when the server token changes.
func StreamToken(serverToken, sandboxID string) string {
	mac := hmac.New(sha256.New, []byte(serverToken))
	mac.Write([]byte("stream:" + sandboxID))
	// "." separates the id from the MAC because neither ids nor base64url
	// ever contain one, while both contain "_".
	return streamTokenPrefix + sandboxID + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// authenticate tells who the bearer token of r speaks for; unauthorized when
// there is none or it is wrong.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	tok, ok := bearer(r)
	if !ok || s.cfg.Token == "" {
		return principal{}, sandbox.Errorf(sandbox.EUnauthorized, "missing or invalid bearer token")
	}
	if equalSecret(tok, s.cfg.Token) {
		return principal{}, nil
	}
	if id, ok := s.streamTokenSandbox(tok); ok {
		return principal{sandboxID: id}, nil
	}
	return principal{}, sandbox.Errorf(sandbox.EUnauthorized, "missing or invalid bearer token")
}

// authorize checks that r may call a route of the given access on the
// sandbox named in its path (sandboxID, "" when the path names none).
func (s *Server) authorize(r *http.Request, a access, sandboxID string) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	if p.sandboxID == "" {
		return nil
	}
	if a != accessRead {
		return sandbox.Errorf(sandbox.EForbidden, "a stream token can only read its own sandbox")
	}
	if p.sandboxID != sandboxID {
		return sandbox.Errorf(sandbox.EForbidden, "this stream token belongs to another sandbox")
	}
	return nil
}

// streamTokenSandbox returns the sandbox a stream token was made for, if tok
// is a genuine one.
func (s *Server) streamTokenSandbox(tok string) (string, bool) {
	rest, ok := strings.CutPrefix(tok, streamTokenPrefix)
	if !ok {
		return "", false
	}
	dot := strings.LastIndexByte(rest, '.')
	if dot <= 0 {
		return "", false
	}
	id := rest[:dot]
	if !equalSecret(tok, StreamToken(s.cfg.Token, id)) {
		return "", false
	}
	return id, true
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// equalSecret compares in constant time; hashing first keeps the time
// independent of the lengths too.
func equalSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
