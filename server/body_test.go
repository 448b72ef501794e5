package server

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/syncbuf"
)

// TestSlowBody: a client that trickles its request body is answered and let
// go when the body timeout passes, instead of holding a goroutine forever;
// a client that goes away mid-body is an INFO line, not an ERROR.
func TestSlowBody(t *testing.T) {
	var logs syncbuf.Buffer
	h := newHarness(t, options{bodyTimeout: 300 * time.Millisecond, logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	dial := func(t *testing.T, body string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		req := "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + h.token +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + body
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("ErrTimeout", func(t *testing.T) {
		c := dial(t, "{")
		// The rest of the body never comes: the server must answer anyway.
		_ = c.SetReadDeadline(time.Now().Add(waitFor))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v\n%s", err, logs.String())
		}
		defer resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusBadRequest; got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
		var e errorEnvelope
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Error.Message, "did not arrive within") {
			t.Fatalf("message %q does not say the body was too slow", e.Error.Message)
		}
	})
	t.Run("ClientGoneIsInfo", func(t *testing.T) {
		c := dial(t, `{"meta`)
		c.Close()
		deadline := time.Now().Add(waitFor)
		for !strings.Contains(logs.String(), "client went away mid-body") {
			if time.Now().After(deadline) {
				t.Fatalf("no log line about the client that went away:\n%s", logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "client went away") && !strings.Contains(line, `"level":"INFO"`) {
				t.Fatalf("a client that went away is logged as %s", line)
			}
		}
	})
}
