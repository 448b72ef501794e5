package natscluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestClusterFailover: two coordinators on a JetStream cluster of three
// servers, the stream and every bucket with 3 replicas, run turns on
// several sandboxes while a writer appends through the store API and
// readers tail the logs; the server that leads the stream is shut down in
// the middle of it. Every turn ends, once, with nothing of it after its
// turn.completed; ids increase; every event an append acknowledged, and
// every event a reader was shown, is in the log afterwards.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of three servers through a failover")
	}
	ctx := context.Background()
	c := natstest.RunCluster(t, 3)
	// The timeout leaves an append time to ride out the election of a new
	// leader; the TTL, that the nodes' renewals do too.
	opts := natsstore.Options{Replicas: 3, Timeout: 30 * time.Second}
	copts := natscluster.Options{Replicas: 3, LeaseTTL: 10 * time.Second}
	nodes := []*node{
		startNodeWith(t, c.URL(), "node-a", opts, copts),
		startNodeWith(t, c.URL(), "node-b", opts, copts),
	}
	natstest.CheckReplicas(t, c.URL(), 3, natsstore.DefaultStreamName)

	const sandboxes, turnsEach = 4, 3
	ids := make([]string, sandboxes)
	for i := range ids {
		var sb sandbox.Sandbox
		nodes[i%2].mustDo("POST", "/v1/sandboxes", `{}`, http.StatusCreated, &sb)
		ids[i] = sb.ID
	}

	// Readers tail every log on node b, as SSE streams do, and remember
	// what they were shown.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	shown := make([][]uint64, sandboxes+1)
	tail := func(i int, id string) {
		defer readers.Done()
		var cursor uint64
		for {
			wake := nodes[1].store.Wait(id)
			recs, err := nodes[1].store.Read(ctx, id, cursor, 100)
			if err == nil {
				for _, r := range recs {
					shown[i] = append(shown[i], r.ID)
					cursor = r.ID
				}
				if len(recs) > 0 {
					continue
				}
			}
			select {
			case <-stop:
				return
			case <-wake:
			case <-time.After(100 * time.Millisecond): // a read that failed mid-failover is tried again
			}
		}
	}
	for i, id := range ids {
		readers.Add(1)
		go tail(i, id)
	}

	// A writer appends through the store API of node a, two events at a
	// time, and remembers what was acknowledged.
	const loadID = "c_load"
	mustCreate(t, nodes[0].store, loadID)
	readers.Add(1)
	go tail(sandboxes, loadID)
	var (
		loadMu  sync.Mutex
		acked   []uint64
		refused int
	)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			evs := []*sandbox.Event{textEvent(fmt.Sprint("load ", n)), textEvent(fmt.Sprint("load ", n, " again"))}
			err := nodes[0].store.Append(ctx, loadID, evs, nil)
			loadMu.Lock()
			if err == nil {
				acked = append(acked, evs[0].ID, evs[1].ID)
			} else {
				refused++
			}
			loadMu.Unlock()
		}
	}()
	loadAcked := func() int {
		loadMu.Lock()
		defer loadMu.Unlock()
		return len(acked)
	}

	// Turns: every sandbox runs its turns one after the other, posted to
	// either node.
	var drivers sync.WaitGroup
	started := make(chan struct{}, sandboxes)
	turns := make([][]string, sandboxes)
	for i, id := range ids {
		drivers.Go(func() {
			for k := range turnsEach {
				turn, err := postTurn(nodes[(i+k)%2], id, "slow")
				if err != nil {
					t.Errorf("sandbox %s, turn %d: %v", id, k, err)
					return
				}
				turns[i] = append(turns[i], turn)
				if k == 0 {
					started <- struct{}{}
				}
				if err := waitTurnEnded(nodes[(i+k+1)%2], id, turn); err != nil {
					t.Errorf("sandbox %s, turn %d: %v", id, k, err)
					return
				}
			}
		})
	}
	for range sandboxes {
		<-started
	}
	deadline := time.Now().Add(20 * time.Second)
	for loadAcked() < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the writer got no appends acknowledged before the failover")
		}
		time.Sleep(5 * time.Millisecond)
	}
	leader := c.StreamLeader(natsstore.DefaultStreamName)
	if leader < 0 {
		t.Fatal("the stream has no leader")
	}
	before := loadAcked()
	c.Stop(leader)
	t.Logf("stopped server %d, the stream's leader, after %d acknowledged appends", leader+1, before)

	drivers.Wait()
	// The writer goes on until it got appends through after the failover.
	deadline = time.Now().Add(30 * time.Second)
	for loadAcked() < before+20 {
		if time.Now().After(deadline) {
			t.Fatalf("the writer got no appends acknowledged after the failover (%d refused)", refused)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-loadDone
	readers.Wait()

	// Everything as a fresh process on the two servers left reads it.
	check := mustOpen(t, c.URL())
	defer check.Close()
	for i, id := range append(slices.Clone(ids), loadID) {
		recs := readAll(t, check, id)
		completed := checkLog(t, id, recs)
		if i < sandboxes {
			for _, turn := range turns[i] {
				if completed[turn] != 1 {
					t.Fatalf("sandbox %s: turn %s completed %d times, want once", id, turn, completed[turn])
				}
			}
		}
		want := shown[i]
		if i == sandboxes {
			want = append(slices.Clone(want), acked...)
		}
		for _, seq := range want {
			if _, found := slices.BinarySearchFunc(recs, seq, func(r sandbox.Record, seq uint64) int { return int(r.ID) - int(seq) }); !found {
				t.Fatalf("sandbox %s: event %d was acknowledged or shown to a reader and is not in the log", id, seq)
			}
		}
	}
	if err := check.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d appends acknowledged, %d refused; the writer's log holds %d events", len(acked)/2, refused, len(readAll(t, check, loadID)))
}

// postTurn starts a turn on n and returns its id. A node that cannot place
// it at the moment (the cluster electing a leader) is asked again.
func postTurn(n *node, id, input string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body, err := n.try("POST", "/v1/sandboxes/"+id+"/turns", `{"input":"`+input+`"}`)
		if err == nil && status == http.StatusAccepted {
			var turn sandbox.Turn
			if err := json.Unmarshal(body, &turn); err != nil {
				return "", err
			}
			return turn.ID, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("post turn on %s: %d %s %v", n.name, status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTurnEnded polls a turn through n until it is no longer queued or
// running.
func waitTurnEnded(n *node, id, turn string) error {
	deadline := time.Now().Add(45 * time.Second)
	for {
		status, body, err := n.try("GET", "/v1/sandboxes/"+id+"/turns/"+turn, "")
		if err == nil && status == http.StatusOK {
			var got sandbox.Turn
			if err := json.Unmarshal(body, &got); err != nil {
				return err
			}
			if got.Status != sandbox.TurnQueued && got.Status != sandbox.TurnRunning {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("turn %s did not end: %d %s %v", turn, status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// try sends an API request and returns the status and body, or the error,
// without failing the test: callers may be racing a failover.
func (n *node) try(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+nodeToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// readAll reads every retained record of a sandbox.
func readAll(t *testing.T, s *natsstore.Store, id string) []sandbox.Record {
	t.Helper()
	var recs []sandbox.Record
	var after uint64
	for {
		page, err := s.Read(context.Background(), id, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return recs
		}
		recs = append(recs, page...)
		after = page[len(page)-1].ID
	}
}

// checkLog checks the invariants of a log: ids strictly increasing, at
// most one turn.completed per turn, and nothing of a turn after its
// turn.completed. It returns how many times each turn completed.
func checkLog(t *testing.T, id string, recs []sandbox.Record) map[string]int {
	t.Helper()
	completed := map[string]int{}
	for i, r := range recs {
		if i > 0 && r.ID <= recs[i-1].ID {
			t.Fatalf("sandbox %s: id %d after %d", id, r.ID, recs[i-1].ID)
		}
		ev, err := r.Decode()
		if err != nil {
			t.Fatalf("sandbox %s: event %d: %v", id, r.ID, err)
		}
		if ev.TurnID == "" {
			continue
		}
		if completed[ev.TurnID] > 0 {
			t.Fatalf("sandbox %s: %s %d of turn %s after its turn.completed", id, ev.Type, r.ID, ev.TurnID)
		}
		if ev.Type == sandbox.TypeTurnCompleted {
			completed[ev.TurnID]++
		}
	}
	return completed
}
