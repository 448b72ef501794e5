package client_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestNonAPIAnswer: an answer without the error object (a proxy's page)
// is still an *Error, typed by its status, with the page's start in the
// message.
func TestNonAPIAnswer(t *testing.T) {
	for _, tt := range []struct {
		status int
		typ    string
	}{
		{http.StatusNotFound, sandbox.ENotFound},
		{http.StatusConflict, sandbox.EConflict},
		{http.StatusGone, sandbox.EInternal}, // a cursor type needs the watermarks of the object
		{http.StatusBadGateway, sandbox.EInternal},
		{http.StatusServiceUnavailable, sandbox.EUnavailable},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(tt.status)
			_, _ = w.Write([]byte("<html>proxy says no</html>"))
		}))
		_, err := client.New(srv.URL, "x").GetSandbox(testContext(t), "c_1")
		srv.Close()
		e := wantType(t, err, tt.typ, tt.status)
		if !strings.Contains(e.Message, "proxy says no") {
			t.Errorf("%d: message %q, want the page's start", tt.status, e.Message)
		}
	}
}
