package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/faultstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Helpers of the store outage tests (outage_test.go).

// storeObserver is the coordinator's observer in these tests: it keeps what
// it was told of the store and wakes whoever waits on a change.
type storeObserver struct {
	mu      sync.Mutex
	changed chan struct{}
	healthy bool
	failed  int // appends refused
	retried int
	waiting int // events waiting now
	peak    int // most events that waited at once
	turns   map[string]int
}

func newStoreObserver() *storeObserver {
	return &storeObserver{changed: make(chan struct{}), healthy: true, turns: map[string]int{}}
}

func (o *storeObserver) update(fn func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fn()
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *storeObserver) TurnCompleted(status string) { o.update(func() { o.turns[status]++ }) }
func (o *storeObserver) ApprovalResolved(string)     {}
func (o *storeObserver) UpdatesDropped(string, int)  {}
func (o *storeObserver) Redacted(int)                {}
func (o *storeObserver) AgentsRunning(int)           {}
func (o *storeObserver) StoreHealthy(ok bool)        { o.update(func() { o.healthy = ok }) }
func (o *storeObserver) AppendFailed()               { o.update(func() { o.failed++ }) }
func (o *storeObserver) AppendRetried()              { o.update(func() { o.retried++ }) }
func (o *storeObserver) EventsWaiting(delta int) {
	o.update(func() { o.waiting += delta; o.peak = max(o.peak, o.waiting) })
}

// wait waits until cond holds of what the observer was told.
func (o *storeObserver) wait(t *testing.T, what string, cond func(o *storeObserver) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		o.mu.Lock()
		ok, ch := cond(o), o.changed
		state := fmt.Sprintf("healthy %v, failed %d, retried %d, waiting %d", o.healthy, o.failed, o.retried, o.waiting)
		o.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting until %s; the observer has: %s", what, state)
		}
	}
}

func (o *storeObserver) unhealthy(t *testing.T) {
	t.Helper()
	o.wait(t, "the store is unhealthy", func(o *storeObserver) bool { return !o.healthy })
}

// settled waits until the store is healthy and nothing waits.
func (o *storeObserver) settled(t *testing.T) {
	t.Helper()
	o.wait(t, "the store is healthy and nothing waits", func(o *storeObserver) bool { return o.healthy && o.waiting == 0 })
}

// outageEnv is an env whose store refuses writes on command.
type outageEnv struct {
	*env
	fs  *faultstore.Store
	obs *storeObserver
}

func newOutageEnv(t *testing.T, tweak func(*coordinator.Config)) *outageEnv {
	t.Helper()
	o := &outageEnv{obs: newStoreObserver()}
	o.env = newEnv(t, func(c *coordinator.Config) {
		o.fs = faultstore.New(c.Store.(*boltstore.Store))
		c.Store = o.fs
		c.Observer = o.obs
		// Retries come quickly, so that a test waits little after a heal.
		c.StoreRetry, c.StoreRetryMax = time.Millisecond, 20*time.Millisecond
		if tweak != nil {
			tweak(c)
		}
	})
	return o
}

func (o *outageEnv) startTurn(id, input string) sandbox.Turn {
	o.t.Helper()
	turn, err := o.co.StartTurn(context.Background(), id, input)
	if err != nil {
		o.t.Fatalf("start turn %q: %v", input, err)
	}
	return turn
}

// startHanging starts a turn of the demo agent that streams a little, then
// waits for a cancel, and returns once all it streamed is in the log: from
// then on the turn writes nothing until something happens to it.
func (o *outageEnv) startHanging(id string) sandbox.Turn {
	o.t.Helper()
	turn := o.startTurn(id, "hang")
	o.waitFor(id, 0, func(ev sandbox.Event) bool {
		d, ok := ev.Data.(*sandbox.MessageUpdated)
		return ok && ev.TurnID == turn.ID && strings.Contains(d.Text, "Working on it")
	})
	return turn
}

// wantUnavailable checks that err is an unavailable error that says why.
func wantUnavailable(t *testing.T, what string, err error, reason string) {
	t.Helper()
	if !sandbox.IsType(err, sandbox.EUnavailable) || !strings.Contains(err.Error(), reason) {
		t.Fatalf("%s during the outage: %v; want unavailable saying %q", what, err, reason)
	}
}

// logReader follows a sandbox's log as a client does, page after page as
// events become visible, and keeps the bytes of every event it saw.
type logReader struct {
	mu   sync.Mutex
	seen map[uint64][]byte
	stop func()
}

func (e *env) watch(id string) *logReader {
	r := &logReader{seen: map[uint64][]byte{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.stop = func() { cancel(); <-done }
	e.t.Cleanup(r.stop)
	go func() {
		defer close(done)
		var after uint64
		for {
			ch := e.store.Wait(id)
			recs, err := e.store.Read(ctx, id, after, 1000)
			if err != nil {
				return
			}
			r.mu.Lock()
			for _, rec := range recs {
				r.seen[rec.ID] = bytes.Clone(rec.JSON)
				after = rec.ID
			}
			r.mu.Unlock()
			if len(recs) > 0 {
				continue
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return r
}

// checkLog checks the rules of docs/events.md over the whole log of id and returns it: ids
// strictly increasing; every turn starts before anything else of it, once,
// never while another turn is open, and ends with exactly one
// turn.completed after which nothing of it comes; every approval.requested
// gets exactly one approval.resolved; each accepted turn is there; and
// every event the reader saw is in the log with the same bytes.
func (e *env) checkLog(id string, r *logReader, accepted ...string) []sandbox.Event {
	e.t.Helper()
	t := e.t
	var recs []sandbox.Record
	var after uint64
	for {
		page, err := e.store.Read(context.Background(), id, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		recs = append(recs, page...)
		after = page[len(page)-1].ID
	}
	var (
		evs       []sandbox.Event
		last      uint64
		open      string
		started   = map[string]int{}
		completed = map[string]int{}
		requested = map[string]bool{}
		resolved  = map[string]int{}
	)
	for _, rec := range recs {
		ev, err := rec.Decode()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.ID <= last {
			t.Errorf("id %d after %d", ev.ID, last)
		}
		last = ev.ID
		turn := ev.TurnID
		switch {
		case ev.Type == sandbox.TypeTurnStarted:
			if open != "" {
				t.Errorf("turn %s started (%d) while turn %s was open", turn, ev.ID, open)
			}
			if started[turn]++; started[turn] > 1 {
				t.Errorf("turn %s started twice (%d)", turn, ev.ID)
			}
			open = turn
		case turn != "" && started[turn] == 0:
			t.Errorf("%s %d of turn %s before its turn.started", ev.Type, ev.ID, turn)
		case turn != "" && completed[turn] > 0:
			t.Errorf("%s %d of turn %s after its turn.completed", ev.Type, ev.ID, turn)
		}
		switch d := ev.Data.(type) {
		case *sandbox.TurnCompleted:
			completed[turn]++
			if open == turn {
				open = ""
			}
		case *sandbox.ApprovalRequested:
			requested[d.ApprovalID] = true
		case *sandbox.ApprovalResolved:
			if resolved[d.ApprovalID]++; !requested[d.ApprovalID] || resolved[d.ApprovalID] > 1 {
				t.Errorf("approval.resolved %d of %s: requested %v, resolved %d times", ev.ID, d.ApprovalID, requested[d.ApprovalID], resolved[d.ApprovalID])
			}
		}
	}
	for a := range requested {
		if resolved[a] != 1 {
			t.Errorf("approval %s resolved %d times, want 1", a, resolved[a])
		}
	}
	for turn := range started {
		if completed[turn] != 1 {
			t.Errorf("turn %s completed %d times, want 1", turn, completed[turn])
		}
	}
	for _, turn := range accepted {
		if started[turn] != 1 {
			t.Errorf("accepted turn %s has %d turn.started, want 1", turn, started[turn])
		}
	}
	if r != nil {
		r.stop()
		logged := map[uint64][]byte{}
		for _, rec := range recs {
			logged[rec.ID] = rec.JSON
		}
		r.mu.Lock()
		for id, b := range r.seen {
			if got, ok := logged[id]; !ok || !bytes.Equal(got, b) {
				t.Errorf("a reader saw event %d as %s; the log has %s", id, b, got)
			}
		}
		r.mu.Unlock()
	}
	if t.Failed() {
		t.Logf("log: %s", types(evs))
	}
	return evs
}

// wantStoreStopped checks that the turn ended failed with the internal
// error of a store that refused its events, after a sandbox.error saying so.
func wantStoreStopped(t *testing.T, evs []sandbox.Event, turnID string) {
	t.Helper()
	var mine []sandbox.Event
	for _, ev := range evs {
		if ev.TurnID == turnID {
			mine = append(mine, ev)
		}
	}
	wantFailed(t, mine, sandbox.ErrInternal, sandbox.ErrInternal)
	if e := sandboxError(mine); !strings.Contains(e.Message, "the event store could not take writes") {
		t.Fatalf("sandbox.error says %q, want that the store could not take writes", e.Message)
	}
}

// wantRetriedOnce checks that every event of a refused append reached the
// log once, in the order it was first refused.
func (o *outageEnv) wantRetriedOnce(evs []sandbox.Event) {
	o.t.Helper()
	byID := map[uint64]sandbox.Event{}
	for _, ev := range evs {
		byID[ev.ID] = ev
	}
	refused := o.fs.RefusedEvents()
	if len(refused) == 0 {
		o.t.Fatal("no event was refused: the outage was not seen")
	}
	var last uint64
	for _, ev := range refused {
		got, ok := byID[ev.ID]
		if ev.ID == 0 || !ok || got.Type != ev.Type || got.TurnID != ev.TurnID {
			o.t.Fatalf("a refused %s of turn %q is not in the log (id %d; the log has %s there)", ev.Type, ev.TurnID, ev.ID, got.Type)
		}
		if ev.ID <= last {
			o.t.Fatalf("refused events reached the log out of order: %d after %d", ev.ID, last)
		}
		last = ev.ID
	}
}

// gatedAgent is the demo agent, in-process, that does not answer before
// open is closed: a boot that lasts as long as a test needs.
func gatedAgent(open <-chan struct{}) coordinator.BuiltinAgent {
	return func(ctx context.Context, stdin io.Reader, stdout io.Writer, env []string) error {
		select {
		case <-open:
		case <-ctx.Done():
			return ctx.Err()
		}
		return agent.RunDemo(ctx, stdin, stdout, env)
	}
}
