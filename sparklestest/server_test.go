package sparklestest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// get answers GET path with the server token.
func get(t *testing.T, srv *sparklestest.Server, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestSameServer: the helper runs what sparkles serve runs: /readyz asks
// the store and the retention loop, /metrics counts, the console is at /.
func TestSameServer(t *testing.T) {
	srv := sparklestest.Start(t)
	if code, body := get(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if code, body := get(t, srv, "/"); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("console: %d %.200s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer st.Close()
	srv.AppendEvents(sb.ID, &sandbox.Event{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{
		MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "hello"}})
	nextOfType(t, ctx, st, sandbox.TypeMessageUpdated)
	// The stream counts a delivery once its write returned, which may be
	// after the client read the event: the count is waited for.
	wants := []string{"sparkles_stream_subscribers 1", "sparkles_store_healthy 1", "sparkles_stream_deliveries_total 1"}
	for {
		code, body := get(t, srv, "/metrics")
		if code != http.StatusOK || !strings.Contains(body, "sparkles_") {
			t.Fatalf("/metrics: %d %.200s", code, body)
		}
		missing := ""
		for _, want := range wants {
			if !strings.Contains(body, want) {
				missing = want
			}
		}
		if missing == "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/metrics lacks %q", missing)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestRetentionRuns: the retention loop of the helper prunes as serve's
// does, with the limits a test gives it.
func TestRetentionRuns(t *testing.T) {
	srv := sparklestest.Start(t, sparklestest.WithRetention(retention.Config{MaxEvents: 2, Interval: 10 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := srv.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		srv.AppendEvents(sb.ID, &sandbox.Event{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{
			MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: strings.Repeat("x", i+1)}})
	}
	// The loop runs every 10 ms: the sandbox shows what it pruned.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := srv.Client.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.PrunedThrough >= 3 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("retention pruned through %d of 5 events with a limit of 2", got.PrunedThrough)
		}
	}
}

// TestWithout: the options turn off what a test does not want.
func TestWithout(t *testing.T) {
	srv := sparklestest.Start(t, sparklestest.WithoutConsole(), sparklestest.WithoutRetention())
	if code, _ := get(t, srv, "/"); code != http.StatusNotFound {
		t.Fatalf("console: %d, want 404 without it", code)
	}
	if code, body := get(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz without retention: %d %s", code, body)
	}
}
