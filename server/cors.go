package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CORS: a browser page served from another origin (an application's own
// front end holding a stream token) may call the API only when its origin is
// listed in Config.CORSOrigins. With an empty list no CORS header is ever
// sent, so browsers keep every other origin out; that is the default.
//
// Credentials mode is never allowed: the API takes a bearer header, not
// cookies, so a page must hold a token to do anything, and no ambient
// credential of the browser's can be borrowed.
const (
	corsMethods       = "GET, POST, PATCH, DELETE, OPTIONS"
	corsHeaders       = "Authorization, Content-Type, Last-Event-ID"
	corsExposeHeaders = "X-Request-Id"
	// corsMaxAge is how long a browser may reuse a preflight answer.
	corsMaxAge = 10 * time.Minute
)

// corsPolicy is the set of allowed origins.
type corsPolicy map[string]bool

// newCORSPolicy normalizes the configured origins the way browsers send
// them: scheme://host[:port], lower case, no trailing slash. Empty entries
// are ignored; nil means CORS is off.
func newCORSPolicy(origins []string) corsPolicy {
	var p corsPolicy
	for _, o := range origins {
		o = strings.ToLower(strings.TrimRight(strings.TrimSpace(o), "/"))
		if o == "" {
			continue
		}
		if p == nil {
			p = corsPolicy{}
		}
		p[o] = true
	}
	return p
}

// handle adds the CORS headers a request from an allowed origin gets, and
// answers its preflight. It reports whether the request is fully answered.
func (p corsPolicy) handle(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if p == nil || origin == "" || !p[origin] {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Origin", origin)
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return false
	}
	// A preflight carries no token (browsers never send one on it), so it
	// is answered here, before authentication, and says nothing about the
	// resource beyond what any allowed page may try.
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", corsMethods)
	h.Set("Access-Control-Allow-Headers", corsHeaders)
	h.Set("Access-Control-Max-Age", strconv.Itoa(int(corsMaxAge/time.Second)))
	w.WriteHeader(http.StatusNoContent)
	return true
}
