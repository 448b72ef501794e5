package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestClassify: every error that says NATS did not answer becomes the
// contract's unavailable, wrapped or not; a refusal of what was asked, a
// fault of a value, a fenced append and a caller who left stay what they
// are.
func TestClassify(t *testing.T) {
	url, _ := natstest.RunServer(t)
	s := mustOpen(t, url)
	defer s.Close()
	ctx := context.Background()
	left, cancel := context.WithCancel(ctx)
	cancel()
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tc := range []struct {
		name        string
		ctx         context.Context
		err         error
		unavailable bool
	}{
		{"Timeout", ctx, nats.ErrTimeout, true},
		{"DeadlineExceeded", ctx, fmt.Errorf("cluster: read lease of c_1: %w", context.DeadlineExceeded), true},
		{"NoResponders", ctx, nats.ErrNoResponders, true},
		{"NoStreamResponse", ctx, jetstream.ErrNoStreamResponse, true},
		{"Reconnecting", ctx, nats.ErrConnectionReconnecting, true},
		{"ReconnectBufExceeded", ctx, nats.ErrReconnectBufExceeded, true},
		{"Disconnected", ctx, nats.ErrDisconnected, true},
		{"NoServers", ctx, nats.ErrNoServers, true},
		{"ConnectionClosed", ctx, nats.ErrConnectionClosed, true},
		{"StaleConnection", ctx, nats.ErrStaleConnection, true},
		{"TemporarilyUnavailable", ctx, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"NetError", ctx, fmt.Errorf("append: %w", opErr), true},
		{"EOF", ctx, io.EOF, true},
		{"Corrupt", ctx, errors.New("sandbox c_1: undecodable state"), false},
		{"Refused", ctx, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 4"}, false},
		{"NotFound", ctx, sandbox.Errorf(sandbox.ENotFound, "sandbox c_1 not found"), false},
		{"Fenced", ctx, &natsstore.FencedError{SandboxID: "c_1", Epoch: 4, Holder: 9}, false},
		{"CallerLeft", left, context.Canceled, false},
		{"Closed", ctx, natsstore.ErrClosed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Classify(tc.ctx, nil, tc.err)
			var se *sandbox.Error
			isUnavailable := errors.As(got, &se) && se.Type == sandbox.EUnavailable
			switch {
			case tc.unavailable && !isUnavailable:
				t.Fatalf("Classify(%v) = %v, want unavailable", tc.err, got)
			case tc.unavailable && !strings.Contains(se.Message, "the event store cannot take writes"):
				t.Fatalf("Classify(%v) says %q, want it to say the store cannot take writes", tc.err, se.Message)
			case !tc.unavailable && got != tc.err:
				t.Fatalf("Classify(%v) = %v, want the error itself", tc.err, got)
			}
		})
	}
	// A fenced append is never internal: the request that made it is
	// answered unavailable, and the coordinator still sees it fenced.
	fenced := error(&natsstore.FencedError{SandboxID: "c_1"})
	if !errors.Is(fenced, sandbox.ErrFenced) || sandbox.ErrorType(fenced) != sandbox.EUnavailable {
		t.Fatalf("a fenced append is %q and fenced %v, want unavailable and fenced", sandbox.ErrorType(fenced), errors.Is(fenced, sandbox.ErrFenced))
	}
}

// waitUnreachable waits until s knows NATS is unreachable.
func waitUnreachable(t *testing.T, s *natsstore.Store) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.Unreachable(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatal("the store does not know NATS is gone")
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// wantUnavailable fails the test unless err is unavailable saying msg.
func wantUnavailable(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Type != sandbox.EUnavailable || !strings.Contains(se.Message, msg) {
		t.Fatalf("%s with NATS gone: %v, want unavailable saying %q", what, err, msg)
	}
}

// TestOutage: with its server gone, the store says so: every call that
// needs the server is answered unavailable, a call that writes with
// nothing sent, while what the process holds in memory is still answered;
// Health says why. (TestServeNATSOutage and TestServeNATSFullOutage, at
// the root, see it come back.)
func TestOutage(t *testing.T) {
	url, stop := natstest.RunServer(t)
	s := mustOpen(t, url)
	defer s.Close()
	if err := s.Unreachable(); err != nil {
		t.Fatalf("Unreachable with the server up: %v", err)
	}
	if err := s.Health(context.Background()); err != nil {
		t.Fatalf("Health with the server up: %v", err)
	}
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvent("before"))
	before := readIDs(t, s, "c_1")

	stop()
	waitUnreachable(t, s)
	if err := s.Health(context.Background()); err == nil || !strings.Contains(err.Error(), "NATS") {
		t.Fatalf("Health with the server gone: %v, want why", err)
	}
	ctx := context.Background()
	const cannot = "the event store cannot take writes"
	wantUnavailable(t, "Append", s.Append(ctx, "c_1", []*sandbox.Event{textEvent("during")}, nil), cannot)
	sb := sandbox.Sandbox{ID: "c_2", Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: t0, UpdatedAt: t0}
	wantUnavailable(t, "Create", s.Create(ctx, sb, []byte(`{}`)), cannot)
	_, err := s.Read(ctx, "c_1", 0, 10)
	wantUnavailable(t, "Read", err, "the event store cannot be read")
	_, err = s.Turn(ctx, "c_1", "turn_x")
	wantUnavailable(t, "Turn", err, "the event store cannot be read")
	got, err := s.Sandbox(ctx, "c_1")
	if err != nil || uint64(got.LastEventID) != before[len(before)-1] {
		t.Fatalf("Sandbox from memory with the server gone: %+v, %v", got, err)
	}
	if _, err := s.Head("c_1"); err != nil {
		t.Fatalf("Head from memory with the server gone: %v", err)
	}
}
