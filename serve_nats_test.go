package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/natsstore/natstest"
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
