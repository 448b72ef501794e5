package natscluster_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestHolder: every node answers where a sandbox's workspace is: here on
// the node that holds it, that node's advertised API elsewhere; once the
// holder let it go, the node asked takes it over and answers here.
func TestHolder(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	ctx := context.Background()
	a := startNode(t, natsURL, "node-a")
	b := startNode(t, natsURL, "node-b")
	c := startNode(t, natsURL, "node-c") // advertises no URL
	for _, n := range []*node{a, b} {
		if err := n.cluster.Advertise(ctx, n.url); err != nil {
			t.Fatal(err)
		}
	}
	var sb sandbox.Sandbox
	a.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &sb)

	t.Run("OK", func(t *testing.T) {
		if url, here, err := a.co.Holder(ctx, sb.ID); err != nil || !here {
			t.Fatalf("A.Holder = %q, %v, %v; want here", url, here, err)
		}
		if url, here, err := b.co.Holder(ctx, sb.ID); err != nil || here || url != a.url {
			t.Fatalf("B.Holder = %q, %v, %v; want A's %s", url, here, err, a.url)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		if _, _, err := b.co.Holder(ctx, "c_nosuchsandbox0000000000000"); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("Holder of an unknown sandbox: %v, want not_found", err)
		}
	})
	t.Run("ErrNoURL", func(t *testing.T) {
		var onC sandbox.Sandbox
		c.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &onC)
		if _, _, err := b.co.Holder(ctx, onC.ID); !sandbox.IsType(err, sandbox.EUnavailable) {
			t.Fatalf("Holder of a sandbox on a node without a URL: %v, want unavailable", err)
		}
	})
	t.Run("Released", func(t *testing.T) {
		a.stop() // lets its leases go at once
		// B trusts that A is live for a moment after it last saw it so.
		deadline := time.Now().Add(10 * nodeTTL)
		for {
			url, here, err := b.co.Holder(ctx, sb.ID)
			if err == nil && here {
				break
			}
			if err != nil || url != a.url || time.Now().After(deadline) {
				t.Fatalf("B.Holder after A stopped = %q, %v, %v; want here", url, here, err)
			}
			time.Sleep(nodeTTL / 20)
		}
		if got := mustClaim(t, b.cluster, sb.ID); got.Owner != "node-b" || got.Taken {
			t.Fatalf("B's claim after Holder = %+v, want B's already", got)
		}
	})
}
