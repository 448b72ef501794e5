package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestServeNATS runs two `sparkles serve` processes on one NATS server: a
// sandbox created on one is listed and driven through the other, and when
// the first is killed the second takes its sandbox over.
func TestServeNATS(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	const token = "nats-test-token"
	start := func(node string) *serveProc {
		p := startServe(t, cliEnv(t), t.TempDir(), token, "--store", natsURL, "--node-id", node, "--lease-ttl", "1s")
		p.waitServing()
		return p
	}
	a, b := start("node-a"), start("node-b")

	var sb sandbox.Sandbox
	a.mustCall("POST", "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
	var list struct {
		Data []sandbox.Sandbox `json:"data"`
	}
	b.mustCall("GET", "/v1/sandboxes", nil, http.StatusOK, &list)
	if len(list.Data) != 1 || list.Data[0].ID != sb.ID {
		t.Fatalf("B lists %+v, want the sandbox created on A", list.Data)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var since uint64
	resp, err := openStream(ctx, b.streams, b.url, token, sb.ID, &since)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := newSSEFrames(resp.Body)
	// next reads frames until one of type typ for turn, and returns the
	// types of all it read.
	next := func(typ sandbox.Type, turn string) (types []sandbox.Type, last sandbox.Event) {
		t.Helper()
		for {
			f, err := frames.next()
			if err != nil {
				t.Fatalf("stream from B: %v after %v\nA:\n%s\nB:\n%s", err, types, a.logTail(), b.logTail())
			}
			if f.id == "" {
				continue
			}
			var ev sandbox.Event
			if err := json.Unmarshal(f.data, &ev); err != nil {
				t.Fatal(err)
			}
			types = append(types, ev.Type)
			if ev.Type == typ && ev.TurnID == turn {
				return types, ev
			}
		}
	}

	var turn sandbox.Turn
	b.mustCall("POST", "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, &turn)
	if _, ev := next(sandbox.TypeTurnCompleted, turn.ID); ev.Data.(*sandbox.TurnCompleted).Status != sandbox.TurnSucceeded {
		t.Fatalf("turn through B: %+v", ev.Data)
	}

	t.Run("ErrNodeInUse", func(t *testing.T) {
		serveFails(t, "pass another --node-id", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--store", natsURL, "--node-id", "node-a")
	})
	t.Run("ErrBadStore", func(t *testing.T) {
		serveFails(t, "want nats://HOST:PORT", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--store", "http://127.0.0.1:4222")
	})

	t.Run("Metrics", func(t *testing.T) {
		// The turn's events were appended by whichever node ran it; the
		// count moves just after an append returns, so a reader may see
		// the events a moment before.
		deadline := time.Now().Add(20 * time.Second)
		for {
			var appended, commits, syncs float64
			for _, p := range []*serveProc{a, b} {
				s, err := scrape(p)
				if err != nil {
					t.Fatal(err)
				}
				appended += s.get("sparkles_events_appended_total")
				commits += s.get("sparkles_commit_seconds_count")
				syncs += s.get("sparkles_fsync_seconds_count")
			}
			if syncs != 0 {
				t.Fatalf("sparkles_fsync_seconds_count = %v on NATS, want 0", syncs)
			}
			if appended >= 1 && commits >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a turn: sparkles_events_appended_total = %v, sparkles_commit_seconds_count = %v, want >= 1", appended, commits)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("NodeKilled", func(t *testing.T) {
		var hang sandbox.Turn
		b.mustCall("POST", "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hang"}, http.StatusAccepted, &hang)
		next(sandbox.TypeMessageUpdated, hang.ID)
		a.kill()

		var after sandbox.Turn
		b.mustCall("POST", "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, &after)
		types, ev := next(sandbox.TypeTurnCompleted, hang.ID)
		if d := ev.Data.(*sandbox.TurnCompleted); d.Status != sandbox.TurnFailed || d.Error == nil || d.Error.Code != sandbox.ErrCoordinatorRestarted {
			t.Fatalf("the turn A was running ended %+v (%v)", d, types)
		}
		if _, ev := next(sandbox.TypeTurnCompleted, after.ID); ev.Data.(*sandbox.TurnCompleted).Status != sandbox.TurnSucceeded {
			t.Fatalf("the next turn, on B: %+v", ev.Data)
		}
	})
}

// TestServeNATSPaused: the coordinator running a turn is paused (SIGSTOP)
// past its lease while the turn streams. Another coordinator takes the
// sandbox over and ends the turn as failed; when the paused one resumes
// (SIGCONT), with the agent's output waiting for it, it writes nothing more
// to that log: it finds its lease gone, stops the agent and serves again.
func TestServeNATSPaused(t *testing.T) {
	natsURL, _ := natstest.RunServer(t)
	const token = "nats-test-token"
	start := func(node string) *serveProc {
		p := startServe(t, cliEnv(t), t.TempDir(), token, "--store", natsURL, "--node-id", node, "--lease-ttl", "1s")
		p.waitServing()
		return p
	}
	a, b := start("node-a"), start("node-b")
	var sb sandbox.Sandbox
	a.mustCall("POST", "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := openStream(ctx, b.streams, b.url, token, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := newSSEFrames(resp.Body)
	next := func(typ sandbox.Type, turn string) sandbox.Event {
		t.Helper()
		for {
			f, err := frames.next()
			if err != nil {
				t.Fatalf("stream from B: %v\nA:\n%s\nB:\n%s", err, a.logTail(), b.logTail())
			}
			if f.id == "" {
				continue
			}
			var ev sandbox.Event
			if err := json.Unmarshal(f.data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == typ && ev.TurnID == turn {
				return ev
			}
		}
	}

	var turn sandbox.Turn
	a.mustCall("POST", "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "slow"}, http.StatusAccepted, &turn)
	next(sandbox.TypeMessageUpdated, turn.ID)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume() // so a failing test's cleanup can stop it

	// B settles the turn once A's lease lapsed: its sweep, or nobody.
	ended := next(sandbox.TypeTurnCompleted, turn.ID)
	if d := ended.Data.(*sandbox.TurnCompleted); d.Status != sandbox.TurnFailed || d.Error == nil || d.Error.Code != sandbox.ErrCoordinatorRestarted {
		t.Fatalf("the turn of the paused node ended %+v", d)
	}
	resume()
	// A finds its leases lapsed (it stops its agents then), registers
	// again, and is ready: from then on it cannot write with the old lease.
	a.waitLog("leases lapsed")
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _ := a.call(ctx, "GET", "/readyz", nil, nil)
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A not ready again after it resumed:\n%s", a.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}

	log := readEventLog(t, b, sb.ID)
	checkEventLog(t, log)
	if last := log[len(log)-1]; last.ID != ended.ID {
		t.Fatalf("the log goes on after the takeover's turn.completed %d: %d %s of turn %s\nA:\n%s", ended.ID, last.ID, last.Type, last.TurnID, a.logTail())
	}

	// The sandbox serves the next turn, through the node that was paused.
	var again sandbox.Turn
	a.mustCall("POST", "/v1/sandboxes/"+sb.ID+"/turns", map[string]string{"input": "hello"}, http.StatusAccepted, &again)
	if ev := next(sandbox.TypeTurnCompleted, again.ID); ev.Data.(*sandbox.TurnCompleted).Status != sandbox.TurnSucceeded {
		t.Fatalf("the next turn: %+v", ev.Data)
	}
	checkEventLog(t, readEventLog(t, b, sb.ID))
}

// checkEventLog checks the invariants of a sandbox's log: ids strictly
// increasing, one turn.completed per turn at most, nothing of a turn
// after its turn.completed.
func checkEventLog(t *testing.T, log []sandbox.Event) {
	t.Helper()
	done := map[string]bool{}
	for i, ev := range log {
		if i > 0 && ev.ID <= log[i-1].ID {
			t.Fatalf("id %d after %d", ev.ID, log[i-1].ID)
		}
		if ev.TurnID == "" {
			continue
		}
		if done[ev.TurnID] {
			t.Fatalf("%s %d of turn %s after its turn.completed", ev.Type, ev.ID, ev.TurnID)
		}
		done[ev.TurnID] = ev.Type == sandbox.TypeTurnCompleted
	}
}

// TestServeNATSCluster: serve on a JetStream cluster of three, given every
// server, with SPARKLES_NATS_REPLICAS=3, makes the stream and the buckets
// with 3 replicas; /readyz reports the store's health.
func TestServeNATSCluster(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	const token = "nats-test-token"
	p := startServe(t, cliEnv(t, "SPARKLES_NATS_REPLICAS=3"), t.TempDir(), token, "--store", c.URL(), "--node-id", "node-a")
	p.waitServing()
	var sb sandbox.Sandbox
	// Streams and buckets of three replicas made a moment ago may still be
	// electing their leaders: a write is then 503 unavailable, which the
	// contract says to try again, as a client does.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		status, err := p.call(ctx, "POST", "/v1/sandboxes", map[string]any{}, &sb)
		cancel()
		if status == http.StatusCreated {
			break
		}
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("POST /v1/sandboxes: status %d, %v; want 201\n%s", status, err, p.logTail())
		}
		t.Logf("POST /v1/sandboxes right after the start: 503 (%v); again", err)
		<-time.After(200 * time.Millisecond) // a client's pause before it tries again
	}

	natstest.CheckReplicas(t, c.URL(), 3, natsstore.DefaultStreamName, "KV_"+natsstore.DefaultKVBucket,
		"KV_"+natscluster.DefaultNodeBucket, "KV_"+natscluster.DefaultLeaseBucket)
	p.mustCall("GET", "/readyz", nil, http.StatusOK, nil)

	t.Run("ErrReplicas", func(t *testing.T) {
		serveFails(t, "--nats-replicas 7", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--store", c.URL(), "--nats-replicas", "7")
	})
}

// TestServeNATSReadyz: /readyz is 503, with the store's reason, while the
// NATS server is gone, and 200 again once it is back.
func TestServeNATSReadyz(t *testing.T) {
	dir := t.TempDir()
	natsURL, stop := natstest.RunServerDir(t, dir)
	m := &app.Main{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Token: "readyz-token", StoreURL: natsURL,
		NodeID: "node-r", LeaseTTL: time.Minute, Logger: slog.New(slog.DiscardHandler)}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	url := "http://" + m.Listener.Addr().String() + "/readyz"
	// waitReady polls /readyz until it answers status with a reason that
	// has want: the store learns of a lost or regained server by itself.
	waitReady := func(status int, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Reason string }
			_ = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode == status && strings.Contains(got.Reason, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %q, want %d with %q", resp.StatusCode, got.Reason, status, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady(http.StatusOK, "")
	stop()
	waitReady(http.StatusServiceUnavailable, "not connected to NATS")
	port, err := strconv.Atoi(natsURL[strings.LastIndexByte(natsURL, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	natstest.RunServerConfig(t, natstest.Config{Dir: dir, Port: port})
	waitReady(http.StatusOK, "")
}
