package natscluster_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
)

// TestClusterNodeURL: a node's API URL, given when it joins or advertised
// later, is what the other nodes look up, and survives its renewals.
func TestClusterNodeURL(t *testing.T) {
	url, _ := natstest.RunServer(t)
	ctx := context.Background()
	s := mustOpen(t, url)
	a, err := natscluster.Join(ctx, s, natscluster.Options{Node: "node-a", LeaseTTL: 10 * time.Second,
		APIURL: "http://127.0.0.1:7410/", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		s.Close()
	})
	_, b := mustJoin(t, url, "node-b", 10*time.Second)

	t.Run("OK", func(t *testing.T) {
		if got, err := b.NodeURL(ctx, "node-a"); err != nil || got != "http://127.0.0.1:7410" {
			t.Fatalf("b.NodeURL(node-a) = %q, %v, want http://127.0.0.1:7410", got, err)
		}
		if got, err := a.NodeURL(ctx, "node-a"); err != nil || got != "http://127.0.0.1:7410" {
			t.Fatalf("a.NodeURL(itself) = %q, %v", got, err)
		}
	})
	t.Run("Advertise", func(t *testing.T) {
		if _, err := a.NodeURL(ctx, "node-b"); err == nil || !strings.Contains(err.Error(), "advertises no API URL") {
			t.Fatalf("NodeURL of a node without one: %v, want it to say so", err)
		}
		if err := b.Advertise(ctx, "http://[::1]:7411"); err != nil {
			t.Fatal(err)
		}
		if got, err := a.NodeURL(ctx, "node-b"); err != nil || got != "http://[::1]:7411" {
			t.Fatalf("NodeURL after Advertise = %q, %v", got, err)
		}
		// Advertise rewrote the node key; the renewal after it must not
		// take that for the key having expired.
		if _, err := b.Renew(ctx); err != nil {
			t.Fatalf("renewal after Advertise: %v", err)
		}
		_, c := mustJoin(t, url, "node-c", 10*time.Second) // nothing cached
		if got, err := c.NodeURL(ctx, "node-b"); err != nil || got != "http://[::1]:7411" {
			t.Fatalf("NodeURL after a renewal = %q, %v", got, err)
		}
	})
	t.Run("ErrUnreachable", func(t *testing.T) {
		if _, err := a.NodeURL(ctx, "node-z"); !errors.Is(err, cluster.ErrUnreachable) {
			t.Fatalf("NodeURL of a node that is not registered: %v, want ErrUnreachable", err)
		}
	})
	t.Run("ErrBadURL", func(t *testing.T) {
		s := mustOpen(t, url)
		defer s.Close()
		for _, bad := range []string{"127.0.0.1:7410", "ftp://h:1", "http://", "http://u:p@h:1", "http://h:1/v1", "http://h:1?x=1"} {
			if err := b.Advertise(ctx, bad); err == nil {
				t.Errorf("Advertise(%q) = nil, want an error", bad)
			}
			if _, err := natscluster.Join(ctx, s, natscluster.Options{Node: "node-bad", APIURL: bad, Logger: slog.New(slog.DiscardHandler)}); err == nil {
				t.Errorf("Join with APIURL %q = nil error", bad)
			}
		}
	})
}
