package client_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// seenTransport records the path and User-Agent of every request it
// carries.
type seenTransport struct {
	mu   sync.Mutex
	seen []string // "path user-agent"
}

func (s *seenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.seen = append(s.seen, r.URL.Path+" "+r.Header.Get("User-Agent"))
	s.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (s *seenTransport) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// TestOptions: calls and streams go through the HTTP client given, with
// the User-Agent given (or the client's own), to the base URL without its
// trailing slash.
func TestOptions(t *testing.T) {
	ctx := testContext(t)
	srv := sparklestest.Start(t)
	tr := &seenTransport{}
	c := client.New(srv.URL+"/", srv.Token, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithUserAgent("app-under-test/1.2"))
	if c.BaseURL() != srv.URL {
		t.Fatalf("BaseURL = %q, want %q", c.BaseURL(), srv.URL)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	defer st.Close()
	srv.AppendEvents(sb.ID, &sandbox.Event{Type: sandbox.TypeMessageUpdated, Data: &sandbox.MessageUpdated{
		MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: "through the transport"}})
	for {
		m, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind == client.KindEvent && m.Event.Type == sandbox.TypeMessageUpdated {
			break
		}
	}
	want := []string{"/v1/sandboxes app-under-test/1.2", "/v1/sandboxes/" + sb.ID + "/events/stream app-under-test/1.2"}
	got := tr.requests()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("requests through the transport: %q, want %q", got, want)
	}

	plain := &seenTransport{}
	c = client.New(srv.URL, srv.Token, client.WithHTTPClient(&http.Client{Transport: plain}))
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if got := plain.requests(); len(got) != 1 || got[0] != "/healthz sparkles-go-client" {
		t.Fatalf("without WithUserAgent: %q", got)
	}
}
