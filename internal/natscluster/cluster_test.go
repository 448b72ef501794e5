package natscluster_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// mustJoin opens a store on url and joins the cluster on it as node name;
// both are closed by the test's cleanup unless a test killed them first.
func mustJoin(tb testing.TB, url, name string, ttl time.Duration) (*natsstore.Store, *natscluster.Cluster) {
	tb.Helper()
	s := mustOpen(tb, url)
	cl, err := natscluster.Join(context.Background(), s, natscluster.Options{
		Node: name, LeaseTTL: ttl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		s.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cl.Close()
		s.Close()
	})
	return s, cl
}

func mustClaim(tb testing.TB, cl *natscluster.Cluster, id string) cluster.Claim {
	tb.Helper()
	got, err := cl.Claim(context.Background(), id)
	if err != nil {
		tb.Fatalf("%s claims %s: %v", cl.Node(), id, err)
	}
	return got
}

// mustRenew renews cl's leases, registering it again if they lapsed (a
// slow machine may take longer than a short TTL to set a test up).
func mustRenew(tb testing.TB, cl *natscluster.Cluster) {
	tb.Helper()
	_, err := cl.Renew(context.Background())
	if errors.Is(err, cluster.ErrLeaseLost) {
		_, err = cl.Renew(context.Background())
	}
	if err != nil {
		tb.Fatalf("%s renews: %v", cl.Node(), err)
	}
}

// waitClaim claims id from cl until cl holds it, and returns that claim;
// cl renews as a live node does. A lapsed lease is only gone once the
// server has expired its node's key, so this polls, at a fraction of the
// TTL, until a generous deadline.
func waitClaim(tb testing.TB, cl *natscluster.Cluster, id string) cluster.Claim {
	tb.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(cl.TTL() / 10)
	defer tick.Stop()
	for {
		mustRenew(tb, cl)
		got := mustClaim(tb, cl, id)
		if got.Owner == cl.Node() {
			return got
		}
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("%s never took %s over from %s", cl.Node(), id, got.Owner)
		}
	}
}

func TestClusterClaim(t *testing.T) {
	url, _ := natstest.RunServer(t)
	_, a := mustJoin(t, url, "node-a", 10*time.Second)
	_, b := mustJoin(t, url, "node-b", 10*time.Second)
	id := sandbox.NewID(sandbox.PrefixSandbox)

	t.Run("OK", func(t *testing.T) {
		if got, want := mustClaim(t, a, id), (cluster.Claim{Owner: "node-a", Taken: true}); got != want {
			t.Fatalf("first claim = %+v, want %+v", got, want)
		}
		if got, want := mustClaim(t, a, id), (cluster.Claim{Owner: "node-a"}); got != want {
			t.Fatalf("claim by the holder = %+v, want %+v", got, want)
		}
		if got, want := mustClaim(t, b, id), (cluster.Claim{Owner: "node-a"}); got != want {
			t.Fatalf("claim by another node = %+v, want %+v", got, want)
		}
	})
	t.Run("Release", func(t *testing.T) {
		if err := b.Release(context.Background(), id); err != nil {
			t.Fatalf("release by a node that does not hold it: %v", err)
		}
		if got, want := mustClaim(t, b, id).Owner, "node-a"; got != want {
			t.Fatalf("owner after a release by another node = %q, want %q", got, want)
		}
		if err := a.Release(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if got, want := mustClaim(t, b, id), (cluster.Claim{Owner: "node-b", Taken: true}); got != want {
			t.Fatalf("claim after release = %+v, want %+v", got, want)
		}
	})
	t.Run("ErrNodeInUse", func(t *testing.T) {
		s := mustOpen(t, url)
		defer s.Close()
		_, err := natscluster.Join(context.Background(), s, natscluster.Options{Node: "node-a", Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, natscluster.ErrNodeInUse) {
			t.Fatalf("join under a live node's name: %v, want ErrNodeInUse", err)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		if _, err := a.Claim(context.Background(), "../x"); !sandbox.IsType(err, sandbox.ENotFound) {
			t.Fatalf("claim of an invalid id: %v, want not_found", err)
		}
	})
}

// TestClusterLapse: a node that stops renewing loses every lease at once,
// another node takes them over one by one, and the first one learns it
// when it renews again and starts afresh with no leases.
func TestClusterLapse(t *testing.T) {
	url, _ := natstest.RunServer(t)
	ttl := 300 * time.Millisecond
	_, a := mustJoin(t, url, "node-a", ttl)
	_, b := mustJoin(t, url, "node-b", ttl)
	id1, id2 := sandbox.NewID(sandbox.PrefixSandbox), sandbox.NewID(sandbox.PrefixSandbox)
	mustRenew(t, a)
	mustClaim(t, a, id1)
	mustClaim(t, a, id2)

	// b renews while it claims; a does not renew at all.
	if got := waitClaim(t, b, id1); !got.Taken {
		t.Fatalf("takeover claim = %+v, want Taken", got)
	}

	if _, err := a.Renew(context.Background()); !errors.Is(err, cluster.ErrLeaseLost) {
		t.Fatalf("renewal after the lapse: %v, want ErrLeaseLost", err)
	}
	if _, err := a.Renew(context.Background()); err != nil {
		t.Fatalf("renewal after ErrLeaseLost registers again: %v", err)
	}
	if got, want := mustClaim(t, a, id1).Owner, "node-b"; got != want {
		t.Fatalf("owner of the lease taken over = %q, want %q", got, want)
	}
	// id2 is still recorded for a's earlier instance: a takes it as a lapsed
	// lease, so it settles it like any other node would.
	if got, want := mustClaim(t, a, id2), (cluster.Claim{Owner: "node-a", Taken: true}); got != want {
		t.Fatalf("claim of its own lapsed lease = %+v, want %+v", got, want)
	}
}

// TestClusterKilled: a node whose connection dies keeps its leases until
// its key expires on the server, then they are free.
func TestClusterKilled(t *testing.T) {
	url, _ := natstest.RunServer(t)
	ttl := 300 * time.Millisecond
	sa, a := mustJoin(t, url, "node-a", ttl)
	_, b := mustJoin(t, url, "node-b", ttl)
	id := sandbox.NewID(sandbox.PrefixSandbox)
	mustRenew(t, a)
	mustClaim(t, a, id)
	killConnection(sa)
	if got := waitClaim(t, b, id); !got.Taken {
		t.Fatalf("takeover claim = %+v, want Taken", got)
	}
}

func TestClusterForward(t *testing.T) {
	url, _ := natstest.RunServer(t)
	_, a := mustJoin(t, url, "node-a", 10*time.Second)
	_, b := mustJoin(t, url, "node-b", 10*time.Second)
	calls := make(chan cluster.Call, 1)
	stop, err := b.Serve(func(ctx context.Context, call cluster.Call) cluster.Reply {
		calls <- call
		if call.Op == cluster.OpDecide {
			return cluster.Reply{Error: &cluster.ReplyError{Type: sandbox.EApprovalResolved, Message: "already"}}
		}
		return cluster.Reply{Result: []byte(`{"id":"turn_1"}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		call := cluster.Call{Op: cluster.OpStartTurn, SandboxID: "c_1", Input: "hi", From: "node-a"}
		rep, err := a.Forward(ctx, "node-b", call)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(rep.Result), `{"id":"turn_1"}`; got != want {
			t.Fatalf("result = %s, want %s", got, want)
		}
		if got := <-calls; !reflect.DeepEqual(got, call) {
			t.Fatalf("served call = %+v, want %+v", got, call)
		}
	})
	t.Run("ErrPastMaxPayload", func(t *testing.T) {
		// A turn with attachments larger than NATS takes is refused
		// before it is sent, naming the limit, and the node never sees it.
		big := cluster.Call{Op: cluster.OpStartTurn, SandboxID: "c_1", From: "node-a",
			Blocks: []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: strings.Repeat("A", 2<<20)}}}
		_, err := a.Forward(ctx, "node-b", big)
		if !sandbox.IsType(err, sandbox.EPayloadTooLarge) || !strings.Contains(err.Error(), "max_payload") {
			t.Fatalf("Forward of a %d-byte call: %v, want payload_too_large naming max_payload", len(big.Blocks[0].Data), err)
		}
		select {
		case got := <-calls:
			t.Fatalf("node-b was called: %+v", got.Op)
		default:
		}
	})
	t.Run("Error", func(t *testing.T) {
		d := sandbox.Decision{Decision: "approve"}
		rep, err := a.Forward(ctx, "node-b", cluster.Call{Op: cluster.OpDecide, SandboxID: "c_1", Decision: &d})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-calls; got.Decision == nil || *got.Decision != d {
			t.Fatalf("served decision = %+v, want %+v", got.Decision, d)
		}
		if rep.Error == nil || rep.Error.Type != sandbox.EApprovalResolved || rep.Error.Message != "already" {
			t.Fatalf("reply error = %+v", rep.Error)
		}
	})
	t.Run("ErrUnreachable", func(t *testing.T) {
		if _, err := a.Forward(ctx, "node-c", cluster.Call{Op: cluster.OpDelete}); !errors.Is(err, cluster.ErrUnreachable) {
			t.Fatalf("forward to a node that does not exist: %v, want ErrUnreachable", err)
		}
		stop()
		stop()
		if _, err := a.Forward(ctx, "node-b", cluster.Call{Op: cluster.OpDelete}); !errors.Is(err, cluster.ErrUnreachable) {
			t.Fatalf("forward to a node that stopped serving: %v, want ErrUnreachable", err)
		}
	})
}
