// Package web is the browser console of Sparkles: a page that lists
// sandboxes, runs prompts, answers approvals, shows a sandbox's live
// transcript with what each turn changed, and its files, and the webhook
// endpoints with their deliveries; and sparkles-events.js, the fetch-based
// reader of the event stream it is built on (EventSource cannot send a
// bearer token).
//
// The files are plain ES modules and CSS, embedded in the binary: there is
// no build step. The page's assets need no auth; every API call the page
// makes carries the token the user entered. package.json only tells node
// that the .js files are ES modules, for `node --test web/`; it and the tests
// are not served.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed index.html app.js api.js approval.js changes.js dom.js files.js guide.js history.js list.js view.js webhooks.js workspace.js sparkles-events.js style.css favicon.svg
var files embed.FS

// contentTypes are set by extension here, not by the system's MIME table,
// which differs between machines and may not know .js as JavaScript.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// csp confines the page to its own origin: scripts and styles from the
// files above only, API calls to the server that served it, no frames. It
// backs up the rule that agent text is only ever set as textContent.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

type asset struct {
	name        string
	body        []byte
	contentType string
	etag        string
}

type handler struct {
	once   sync.Once
	assets map[string]*asset
}

// Handler serves the console at "/" and its assets beside it. Mount it for
// every path outside the API (server.Config.Static). The assets are read
// and hashed at the first request, not at the server's start.
func Handler() http.Handler { return &handler{} }

func (h *handler) load() {
	h.assets = map[string]*asset{}
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("web: embedded files: " + err.Error()) // the embed directive guarantees them
	}
	for _, e := range entries {
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic("web: embedded file " + e.Name() + ": " + err.Error())
		}
		sum := sha256.Sum256(body)
		h.assets["/"+e.Name()] = &asset{
			name:        e.Name(),
			body:        body,
			contentType: contentTypes[path.Ext(e.Name())],
			etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
		}
	}
	h.assets["/"] = h.assets["/index.html"]
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h.once.Do(h.load)
	a, ok := h.assets[r.URL.Path]
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.contentType)
	hd.Set("ETag", a.etag)
	// Revalidate every time: the ETag makes that a 304, and a new binary
	// never runs with the old binary's scripts.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	if strings.HasSuffix(a.name, ".html") {
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
	}
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}
