package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/app"
)

// TestReadyz: /readyz answers 200 while the server can work, and 503 with
// the reason once the retention loop has stopped and once the database is
// closed.
func TestReadyz(t *testing.T) {
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: "readyz-token", Logger: slog.New(slog.DiscardHandler)}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close()
		}
	})
	url := "http://" + m.Listener.Addr().String() + "/readyz"
	get := func(wantStatus int, wantReason string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var got struct{ Status, Reason string }
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("GET /readyz: %v in %s", err, body)
		}
		if resp.StatusCode != wantStatus || !strings.Contains(got.Reason, wantReason) {
			t.Fatalf("GET /readyz = %d %s, want %d and a reason with %q", resp.StatusCode, body, wantStatus, wantReason)
		}
	}
	get(http.StatusOK, "")

	if err := m.Retainer.Close(); err != nil {
		t.Fatal(err)
	}
	get(http.StatusServiceUnavailable, "the retention loop is not running")

	if err := m.Store.Close(); err != nil {
		t.Fatal(err)
	}
	get(http.StatusServiceUnavailable, "the database does not answer")

	closed = true
	m.Retainer, m.Store = nil, nil // closed above
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}
