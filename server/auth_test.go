package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// routePath fills the parameters of a registered route's path.
func routePath(path string, params map[string]string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if v, ok := params[strings.TrimPrefix(p, ":")]; ok && strings.HasPrefix(p, ":") {
			parts[i] = v
		}
	}
	return strings.Join(parts, "/")
}

// authFixture is a sandbox with a turn and an approval, so every route has
// something real to address.
type authFixture struct {
	h      *harness
	a, b   created
	params map[string]string
}

func newAuthFixture(t *testing.T) *authFixture {
	h := newHarness(t, options{})
	a, b := h.createSandbox(), h.createSandbox()
	turnID := h.startTurnEvent(a.ID)
	return &authFixture{h: h, a: a, b: b, params: map[string]string{
		"id": a.ID, "turn_id": turnID, "approval_id": sandbox.NewID(sandbox.PrefixApproval),
	}}
}

func TestAuth(t *testing.T) {
	f := newAuthFixture(t)
	h := f.h
	if len(h.srv.routes) == 0 {
		t.Fatal("no routes registered")
	}
	for _, rte := range h.srv.routes {
		path := routePath(rte.path, f.params)
		t.Run(rte.method+" "+rte.path, func(t *testing.T) {
			for name, header := range map[string][]string{
				"ErrNoToken":      nil,
				"ErrBadToken":     {"Authorization", "Bearer wrong"},
				"ErrOtherScheme":  {"Authorization", "Basic " + testToken},
				"ErrEmptyBearer":  {"Authorization", "Bearer "},
				"ErrTokenPrefix":  {"Authorization", "Bearer " + testToken[:len(testToken)-1]},
				"ErrForgedStream": {"Authorization", "Bearer " + StreamToken("other-server", f.a.ID)},
			} {
				resp := h.request(rte.method, path, "", `{}`, header...)
				resp.fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
				if resp.header.Get("WWW-Authenticate") == "" {
					t.Fatalf("%s: 401 without WWW-Authenticate", name)
				}
			}
		})
	}
	t.Run("NothingHappensUnauthenticated", func(t *testing.T) {
		h.request(http.MethodDelete, "/v1/sandboxes/"+f.a.ID, "wrong", nil).fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
		var sb sandbox.Sandbox
		h.ok(http.MethodGet, "/v1/sandboxes/"+f.a.ID, nil, http.StatusOK, &sb)
		if got, want := sb.Status, sandbox.StatusReady; got != want {
			t.Fatalf("status %q after an unauthenticated delete, want %q", got, want)
		}
	})
	t.Run("ErrUnknownRouteNoToken", func(t *testing.T) {
		h.request(http.MethodGet, "/v1/nope", "", nil).fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
		h.request(http.MethodPut, "/v1/sandboxes", "", nil).fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
	})
	t.Run("OKLowerCaseScheme", func(t *testing.T) {
		resp := h.request(http.MethodGet, "/v1/sandboxes", "", nil, "Authorization", "bearer "+testToken)
		if got, want := resp.status, http.StatusOK; got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
	})
}

func TestStreamToken(t *testing.T) {
	f := newAuthFixture(t)
	h := f.h
	tok := f.a.StreamToken
	t.Run("Derivation", func(t *testing.T) {
		if got, want := StreamToken(testToken, f.a.ID), tok; got != want {
			t.Fatalf("StreamToken = %q, want the create answer's %q", got, want)
		}
		if StreamToken(testToken, f.b.ID) == tok || StreamToken("other", f.a.ID) == tok {
			t.Fatal("stream tokens of another sandbox or server are equal")
		}
		if strings.Contains(tok, testToken) {
			t.Fatal("the stream token contains the server token")
		}
	})
	for _, rte := range h.srv.routes {
		path := routePath(rte.path, f.params)
		t.Run(rte.method+" "+rte.path, func(t *testing.T) {
			if rte.access == accessFull {
				h.request(rte.method, path, tok, `{}`).fails(t, http.StatusForbidden, sandbox.EForbidden)
				return
			}
			if rte.method != http.MethodGet {
				t.Fatalf("a read route that is %s", rte.method)
			}
			if got, want := streamTokenStatus(t, h, path, tok), http.StatusOK; got != want {
				t.Fatalf("own sandbox: status %d, want %d", got, want)
			}
			other := routePath(rte.path, map[string]string{"id": f.b.ID})
			h.request(rte.method, other, tok, nil).fails(t, http.StatusForbidden, sandbox.EForbidden)
		})
	}
	t.Run("ErrTampered", func(t *testing.T) {
		forged := "st_" + f.b.ID + tok[strings.LastIndexByte(tok, '.'):]
		h.request(http.MethodGet, "/v1/sandboxes/"+f.b.ID, forged, nil).fails(t, http.StatusUnauthorized, sandbox.EUnauthorized)
	})
}

// streamTokenStatus answers the status of a GET with the given token,
// without reading a stream's body to its (never coming) end.
func streamTokenStatus(t *testing.T, h *harness, path, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Logf("body: %s", b)
	}
	return resp.StatusCode
}
