package natscluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// wantUnavailable fails the test unless err is unavailable saying msg.
func wantUnavailable(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Type != sandbox.EUnavailable || !strings.Contains(se.Message, msg) {
		t.Fatalf("%s: %v, want unavailable saying %q", what, err, msg)
	}
}

// poll waits until cond holds, or fails the test with what after a
// generous deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// TestClaimLapsed: a node whose leases lapsed (no renewal got through in
// time) answers a claim unavailable at once, not internal: it takes
// sandboxes again once it registers anew.
func TestClaimLapsed(t *testing.T) {
	url, _ := natstest.RunServer(t)
	_, cl := mustJoin(t, url, "lapsing", time.Second)
	poll(t, "the leases never lapsed without renewals", func() bool { return cl.Ready() != nil })
	_, err := cl.Claim(context.Background(), "c_lapsed")
	wantUnavailable(t, "a claim with the leases lapsed", err, "leases have lapsed")
	mustRenew(t, cl)
	mustClaim(t, cl, "c_lapsed")
}

// TestClaimUnreachable: with NATS gone, a claim and a forwarded call are
// answered unavailable at once, not after their timeouts, and not as
// internal errors.
func TestClaimUnreachable(t *testing.T) {
	url, stop := natstest.RunServer(t)
	s, cl := mustJoin(t, url, "cut", time.Minute)
	stop()
	poll(t, "the store does not know NATS is gone", func() bool { return s.Unreachable() != nil })
	const cannot = "the event store cannot take writes"
	_, err := cl.Claim(context.Background(), "c_new")
	wantUnavailable(t, "a claim with NATS gone", err, cannot)
	_, err = cl.Forward(context.Background(), "other", cluster.Call{Op: cluster.OpStartTurn, SandboxID: "c_new"})
	wantUnavailable(t, "a forwarded call with NATS gone", err, cannot)
}
