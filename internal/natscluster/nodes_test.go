package natscluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/internal/syncbuf"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/server"
)

const nodeToken = "test-token"

// nodeTTL is the lease TTL of the node tests: short, so a takeover comes
// quickly, yet several renewals long, so a busy machine does not lapse a
// live node.
const nodeTTL = time.Second

// node is one coordinator of a cluster, with its HTTP server on loopback.
type node struct {
	t       *testing.T
	name    string
	dir     string
	store   *natsstore.Store
	cluster *natscluster.Cluster
	co      *coordinator.Coordinator
	srv     *server.Server
	url     string
	done    bool
}

func startNode(t *testing.T, natsURL, name string) *node {
	t.Helper()
	return startNodeWith(t, natsURL, name, natsstore.Options{}, natscluster.Options{LeaseTTL: nodeTTL})
}

// startNodeWith is startNode with the store's and the cluster's options
// (their names and loggers are set here).
func startNodeWith(t *testing.T, natsURL, name string, opts natsstore.Options, copts natscluster.Options) *node {
	t.Helper()
	ctx := context.Background()
	log := testLogger(t, name)
	n := &node{t: t, name: name, dir: t.TempDir()}
	var err error
	opts.Logger = log
	if n.store, err = natsstore.Open(ctx, natsURL, opts); err != nil {
		t.Fatal(err)
	}
	copts.Node, copts.Logger = name, log
	if n.cluster, err = natscluster.Join(ctx, n.store, copts); err != nil {
		t.Fatal(err)
	}
	n.co, err = coordinator.New(coordinator.Config{
		Store:         n.store,
		DataDir:       n.dir,
		Builtins:      map[string]coordinator.BuiltinAgent{"demo": agent.RunDemo},
		FlushInterval: 5 * time.Millisecond,
		Logger:        log,
		Cluster:       n.cluster,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.co.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	n.srv = server.New(server.Config{Backend: n.co, Store: n.store, Token: nodeToken, Logger: log})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go n.srv.Serve(l)
	n.url = "http://" + l.Addr().String()
	t.Cleanup(n.stop)
	return n
}

// testLogger logs to a buffer that is shown if the test fails.
func testLogger(t *testing.T, name string) *slog.Logger {
	var buf syncbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// stop shuts the node down gracefully: turns end as canceled, then its
// leases are let go.
func (n *node) stop() {
	if n.done {
		return
	}
	n.done = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	n.co.Close()
	n.cluster.Close()
	n.store.Close()
}

// kill stops the node as if its process died: its NATS connection goes
// first, so nothing it does after reaches NATS (no turn is completed, no
// status written, no lease let go), then its agents and HTTP server stop.
func (n *node) kill() {
	n.done = true
	killConnection(n.store)
	n.co.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	n.store.Close()
}

// do sends an API request and returns the status and body.
func (n *node) do(method, path, body string) (int, []byte) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodeToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// mustDo is do that expects the status and decodes the body into v.
func (n *node) mustDo(method, path, body string, status int, v any) {
	n.t.Helper()
	got, b := n.do(method, path, body)
	if got != status {
		n.t.Fatalf("%s %s on %s: %d %s, want %d", method, path, n.name, got, b, status)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			n.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// frame is one durable SSE frame: its id line and its data.
type frame struct {
	id   string
	ev   sandbox.Event
	data []byte
}

// stream reads a sandbox's SSE stream from a node, from since, and sends
// its durable frames on the returned channel. It ends with the test.
func (n *node) stream(id string, since int) <-chan frame {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url+"/v1/sandboxes/"+id+"/events/stream?since="+strconv.Itoa(since), nil)
	if err != nil {
		n.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		n.t.Fatalf("stream on %s: %s", n.name, resp.Status)
	}
	out := make(chan frame, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		r := bufio.NewReader(resp.Body)
		var f frame
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			line = bytes.TrimRight(line, "\n")
			switch {
			case bytes.HasPrefix(line, []byte("id: ")):
				f.id = string(line[4:])
			case bytes.HasPrefix(line, []byte("data: ")):
				f.data = append(f.data, line[6:]...)
			case len(line) == 0:
				if f.id != "" {
					if json.Unmarshal(f.data, &f.ev) != nil {
						return
					}
					out <- f
				}
				f = frame{}
			}
		}
	}()
	return out
}

// until reads frames until one satisfies done and returns all it read.
func until(t *testing.T, frames <-chan frame, done func(sandbox.Event) bool) []frame {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var got []frame
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("stream ended; frames so far: %s", frameTypes(got))
			}
			got = append(got, f)
			if done(f.ev) {
				return got
			}
		case <-deadline:
			t.Fatalf("timed out; frames so far: %s", frameTypes(got))
		}
	}
}

func frameTypes(fs []frame) string {
	var s []string
	for _, f := range fs {
		s = append(s, f.id+":"+string(f.ev.Type))
	}
	return strings.Join(s, " ")
}

func typeIs(typ sandbox.Type) func(sandbox.Event) bool {
	return func(ev sandbox.Event) bool { return ev.Type == typ }
}

// page is a JSON page of events with each event's bytes as answered.
type page struct {
	Data []json.RawMessage `json:"data"`
}

// TestTwoNodes: a sandbox created on node A is streamed from node B, its
// turn is started and approved through B, and B's stream shows the whole
// turn with the ids and bytes of A's log. Calls posted to B answer as A
// would have, errors included, and the agent runs on A only.
func TestTwoNodes(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	a := startNode(t, natsURL, "node-a")
	b := startNode(t, natsURL, "node-b")

	var sb sandbox.Sandbox
	a.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &sb)
	frames := b.stream(sb.ID, 0)

	var turn sandbox.Turn
	b.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"write notes.txt"}`, http.StatusAccepted, &turn)
	if got, want := turn.SandboxID, sb.ID; got != want {
		t.Fatalf("turn of sandbox %q, want %q", got, want)
	}
	seen := until(t, frames, typeIs(sandbox.TypeApprovalRequested))
	req, ok := seen[len(seen)-1].ev.Data.(*sandbox.ApprovalRequested)
	if !ok {
		t.Fatalf("approval.requested data is %T", seen[len(seen)-1].ev.Data)
	}
	var appr sandbox.Approval
	b.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/approvals/"+req.ApprovalID, `{"decision":"approve"}`, http.StatusOK, &appr)
	if appr.Decision == nil || *appr.Decision != sandbox.DecisionApproved {
		t.Fatalf("approval answered through B = %+v", appr)
	}
	seen = append(seen, until(t, frames, typeIs(sandbox.TypeTurnCompleted))...)

	t.Run("SameLog", func(t *testing.T) {
		// B may show the last events a moment before A's own append has
		// returned and A's memory has them.
		lastID, err := strconv.ParseUint(seen[len(seen)-1].id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		storetest.WaitHead(t, a.store, sb.ID, lastID)
		var log page
		a.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/events?since=0&limit=1000", "", http.StatusOK, &log)
		if got, want := len(seen), len(log.Data); got != want {
			t.Fatalf("B streamed %d events (%s), A's log has %d", got, frameTypes(seen), want)
		}
		for i, raw := range log.Data {
			var ev struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			if got, want := seen[i].id, ev.ID; got != want {
				t.Fatalf("frame %d has id %s, A's log %s", i, got, want)
			}
			if got, want := string(seen[i].data), string(raw); got != want {
				t.Fatalf("frame %s differs from A's log:\nB: %s\nA: %s", ev.ID, got, want)
			}
		}
		last := seen[len(seen)-1].ev
		done, ok := last.Data.(*sandbox.TurnCompleted)
		if !ok || done.Status != sandbox.TurnSucceeded || last.TurnID != turn.ID {
			t.Fatalf("last event %s of turn %s: %+v, want turn %s succeeded", last.Type, last.TurnID, last.Data, turn.ID)
		}
	})

	t.Run("AgentOnA", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(datadir.Dir(a.dir).Sandbox(sb.ID).Work(), "notes.txt")); err != nil {
			t.Fatalf("the file the agent wrote on A: %v", err)
		}
		if _, err := os.Stat(string(datadir.Dir(b.dir).Sandbox(sb.ID))); !os.IsNotExist(err) {
			t.Fatalf("B has a directory for the sandbox: %v", err)
		}
	})

	// The same request through A and through B answers the same.
	same := func(t *testing.T, method, path, body string, status int) {
		t.Helper()
		codeA, bodyA := a.do(method, path, body)
		codeB, bodyB := b.do(method, path, body)
		if codeA != status || codeB != codeA || !bytes.Equal(bodyA, bodyB) {
			t.Fatalf("%s %s:\nA: %d %s\nB: %d %s\nwant %d from both", method, path, codeA, bodyA, codeB, bodyB, status)
		}
	}
	t.Run("ErrApprovalResolved", func(t *testing.T) {
		same(t, "POST", "/v1/sandboxes/"+sb.ID+"/approvals/"+req.ApprovalID, `{"decision":"deny"}`, http.StatusConflict)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		same(t, "POST", "/v1/sandboxes/"+sb.ID+"/approvals/appr_01jx4d8m2q7r0v5b3n6k9p1w2z", `{"decision":"deny"}`, http.StatusNotFound)
	})
	t.Run("ErrTurnInProgress", func(t *testing.T) {
		var hang sandbox.Turn
		b.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"hang"}`, http.StatusAccepted, &hang)
		same(t, "POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"again"}`, http.StatusConflict)
		var got sandbox.Turn
		b.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/turns/"+hang.ID, "", http.StatusOK, &got)
		if got.ID != hang.ID {
			t.Fatalf("turn read through B = %+v", got)
		}
		b.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/turns/"+hang.ID+"/cancel", "", http.StatusAccepted, nil)
		ended := until(t, frames, typeIs(sandbox.TypeTurnCompleted))
		if d := ended[len(ended)-1].ev.Data.(*sandbox.TurnCompleted); d.Status != sandbox.TurnCanceled {
			t.Fatalf("turn canceled through B ended %s", d.Status)
		}
	})
	t.Run("RetriedCall", func(t *testing.T) {
		// A sender that lost the answer asks again with the same call id:
		// the holder runs it once and answers both the same.
		call := cluster.Call{ID: "call_retried", Op: cluster.OpStartTurn, SandboxID: sb.ID, Input: "hello", From: b.name}
		first, err := b.cluster.Forward(context.Background(), a.name, call)
		if err != nil {
			t.Fatal(err)
		}
		again, err := b.cluster.Forward(context.Background(), a.name, call)
		if err != nil {
			t.Fatal(err)
		}
		if first.Error != nil || again.Error != nil || !bytes.Equal(first.Result, again.Result) {
			t.Fatalf("answers to one call asked twice:\n%+v %s\n%+v %s", first.Error, first.Result, again.Error, again.Result)
		}
		until(t, frames, typeIs(sandbox.TypeTurnCompleted))
	})
	t.Run("Delete", func(t *testing.T) {
		var del sandbox.Sandbox
		b.mustDo("DELETE", "/v1/sandboxes/"+sb.ID, "", http.StatusOK, &del)
		if got, want := del.Status, sandbox.StatusDeleted; got != want {
			t.Fatalf("status after a delete through B = %q, want %q", got, want)
		}
		same(t, "POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"after"}`, http.StatusConflict)
	})
}

// TestNodeDeath: node A dies mid-turn (no word of it reaches NATS). Node B
// completes its open turns as failed once A's lease lapses, whether or not
// anyone calls the sandbox, and the next turn boots the agent on B.
func TestNodeDeath(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	a := startNode(t, natsURL, "node-a")
	b := startNode(t, natsURL, "node-b")

	// One sandbox waits on an approval and nobody calls it again; the other
	// is mid-reply and gets its next turn through B at once.
	var idle, busy sandbox.Sandbox
	a.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &idle)
	a.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &busy)
	idleFrames, busyFrames := b.stream(idle.ID, 0), b.stream(busy.ID, 0)
	var idleTurn, busyTurn sandbox.Turn
	a.mustDo("POST", "/v1/sandboxes/"+idle.ID+"/turns", `{"input":"write notes.txt"}`, http.StatusAccepted, &idleTurn)
	a.mustDo("POST", "/v1/sandboxes/"+busy.ID+"/turns", `{"input":"hang"}`, http.StatusAccepted, &busyTurn)
	until(t, idleFrames, typeIs(sandbox.TypeApprovalRequested))
	until(t, busyFrames, typeIs(sandbox.TypeMessageUpdated))

	a.kill()

	var next sandbox.Turn
	b.mustDo("POST", "/v1/sandboxes/"+busy.ID+"/turns", `{"input":"hello"}`, http.StatusAccepted, &next)

	t.Run("Settled", func(t *testing.T) {
		evs := until(t, idleFrames, typeIs(sandbox.TypeTurnCompleted))
		var sawError, sawResolved bool
		for _, f := range evs {
			switch d := f.ev.Data.(type) {
			case *sandbox.SandboxError:
				sawError = d.Code == sandbox.ErrCoordinatorRestarted
			case *sandbox.ApprovalResolved:
				sawResolved = d.Decision == sandbox.DecisionFailed && d.Reason == sandbox.ReasonAgentExited
			case *sandbox.TurnCompleted:
				if d.Status != sandbox.TurnFailed || d.Error == nil || d.Error.Code != sandbox.ErrCoordinatorRestarted {
					t.Fatalf("turn.completed = %+v, want failed with coordinator_restarted", d)
				}
				if f.ev.TurnID != idleTurn.ID {
					t.Fatalf("turn.completed of %s, want %s", f.ev.TurnID, idleTurn.ID)
				}
			}
		}
		if !sawError || !sawResolved {
			t.Fatalf("settled without sandbox.error coordinator_restarted (%v) or approval.resolved failed (%v): %s", sawError, sawResolved, frameTypes(evs))
		}
		var got sandbox.Sandbox
		b.mustDo("GET", "/v1/sandboxes/"+idle.ID, "", http.StatusOK, &got)
		if got.Status != sandbox.StatusStopped || got.CurrentTurn != nil {
			t.Fatalf("sandbox after the takeover: status %q, current turn %v; want stopped and none", got.Status, got.CurrentTurn)
		}
	})

	t.Run("NextTurnOnB", func(t *testing.T) {
		evs := until(t, busyFrames, func(ev sandbox.Event) bool {
			return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == next.ID
		})
		completed := 0
		for _, f := range evs {
			if d, ok := f.ev.Data.(*sandbox.TurnCompleted); ok {
				completed++
				want := sandbox.TurnFailed
				if f.ev.TurnID == next.ID {
					want = sandbox.TurnSucceeded
				} else if f.ev.TurnID != busyTurn.ID {
					t.Fatalf("turn.completed of unknown turn %s", f.ev.TurnID)
				}
				if d.Status != want {
					t.Fatalf("turn %s completed %s, want %s", f.ev.TurnID, d.Status, want)
				}
			}
		}
		if completed != 2 {
			t.Fatalf("%d turn.completed events, want one per turn: %s", completed, frameTypes(evs))
		}
		if _, err := os.Stat(datadir.Dir(b.dir).Sandbox(busy.ID).Work()); err != nil {
			t.Fatalf("the agent's directory on B: %v", err)
		}
	})
}

// TestSilentHolder: the holder of a sandbox's lease takes a forwarded call
// and never answers, then stops renewing (a node that died with the call in
// flight). The node that forwarded it takes the sandbox over once the lease
// lapses and runs the call itself.
func TestSilentHolder(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	b := startNode(t, natsURL, "node-b")
	zs, z := mustJoin(t, natsURL, "node-z", nodeTTL)
	mustRenew(t, z)
	id := sandbox.NewID(sandbox.PrefixSandbox)
	if got := mustClaim(t, z, id); got.Owner != "node-z" {
		t.Fatalf("claim of a new sandbox = %+v", got)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo",
		CreatedAt: now, UpdatedAt: now, Metadata: map[string]string{}}
	if err := zs.Create(context.Background(), sb, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	served := make(chan cluster.Call, 8)
	release := make(chan struct{})
	if _, err := z.Serve(func(ctx context.Context, call cluster.Call) cluster.Reply {
		served <- call
		select {
		case <-release:
		case <-ctx.Done():
		}
		return cluster.Reply{Error: &cluster.ReplyError{Message: "too late"}}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release) }) // before z's own cleanup waits on its calls

	frames := b.stream(id, 0)
	var turn sandbox.Turn
	b.mustDo("POST", "/v1/sandboxes/"+id+"/turns", `{"input":"hello"}`, http.StatusAccepted, &turn)
	select {
	case call := <-served:
		if call.Op != cluster.OpStartTurn || call.SandboxID != id || call.From != "node-b" || call.ID == "" {
			t.Fatalf("call the silent holder got: %+v", call)
		}
	default:
		t.Fatal("the turn never reached the holder of the lease")
	}
	evs := until(t, frames, typeIs(sandbox.TypeTurnCompleted))
	last := evs[len(evs)-1]
	if d := last.ev.Data.(*sandbox.TurnCompleted); last.ev.TurnID != turn.ID || d.Status != sandbox.TurnSucceeded {
		t.Fatalf("turn %s completed %s; want %s succeeded (%s)", last.ev.TurnID, d.Status, turn.ID, frameTypes(evs))
	}
	if got := mustClaim(t, b.cluster, id); got.Owner != "node-b" {
		t.Fatalf("lease after the takeover = %+v, want node-b's", got)
	}
}

// TestLeaseLapse: node A's registration disappears under it (as when its
// renewals failed for a whole TTL). A stops its agents without a word in
// the logs and registers afresh; the turn it was running is settled as by
// a takeover, once, and the sandbox serves the next turn.
func TestLeaseLapse(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	a := startNode(t, natsURL, "node-a")
	b := startNode(t, natsURL, "node-b")

	var sb sandbox.Sandbox
	a.mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &sb)
	frames := b.stream(sb.ID, 0)
	var hang sandbox.Turn
	a.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"hang"}`, http.StatusAccepted, &hang)
	until(t, frames, typeIs(sandbox.TypeMessageUpdated))

	ctx := context.Background()
	nodes, err := natstest.JetStream(t, natsURL).KeyValue(ctx, natscluster.DefaultNodeBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}

	evs := until(t, frames, typeIs(sandbox.TypeTurnCompleted))
	last := evs[len(evs)-1]
	if d := last.ev.Data.(*sandbox.TurnCompleted); last.ev.TurnID != hang.ID || d.Status != sandbox.TurnFailed ||
		d.Error == nil || d.Error.Code != sandbox.ErrCoordinatorRestarted {
		t.Fatalf("turn %s ended %+v; want %s failed with coordinator_restarted (%s)", last.ev.TurnID, d, hang.ID, frameTypes(evs))
	}
	// Once A has registered again, a turn through it runs wherever the
	// sandbox's lease now is, and the turn that lapsed ended only once.
	// Its lease loop does that within TTL/3; nothing signals it, so poll.
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(nodeTTL / 20)
	defer tick.Stop()
	for a.cluster.Ready() != nil {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("node A did not register again: %v", a.cluster.Ready())
		}
	}
	var next sandbox.Turn
	a.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/turns", `{"input":"hello"}`, http.StatusAccepted, &next)
	evs = until(t, frames, func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == next.ID })
	for _, f := range evs {
		if f.ev.TurnID == hang.ID {
			t.Fatalf("event %s of the lapsed turn after it completed", f.ev.Type)
		}
	}
	if d := evs[len(evs)-1].ev.Data.(*sandbox.TurnCompleted); d.Status != sandbox.TurnSucceeded {
		t.Fatalf("the next turn ended %s", d.Status)
	}
}
