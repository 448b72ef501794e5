package natsstore_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// fenceTTL is long: in these tests no lease lapses by itself, the test
// makes it lapse.
const fenceTTL = time.Minute

// fenced is two nodes sharing a server: a holds the lease of sandbox id
// and wrote to it; b takes it over when the test says a is gone.
type fenced struct {
	t        *testing.T
	url      string
	a, b     *natsstore.Store
	ca, cb   *natscluster.Cluster
	id       string
	js       jetstream.JetStream
	replicas int
}

func newFenced(t *testing.T, url string, replicas int) *fenced {
	t.Helper()
	f := &fenced{t: t, url: url, js: natstest.JetStream(t, url), replicas: replicas, id: sandbox.NewID(sandbox.PrefixSandbox)}
	f.a, f.ca = f.join("a")
	f.b, f.cb = f.join("b")
	if got := mustClaim(t, f.ca, f.id); got.Owner != f.ca.Node() {
		t.Fatalf("a's claim of a new sandbox = %+v", got)
	}
	mustCreate(t, f.a, f.id)
	ids := mustAppend(t, f.a, f.id, textEvent("a1"), textEvent("a2"))
	// Every scenario starts from b knowing the sandbox as a left it: on a
	// replicated stream b may read from a replica that has not caught up
	// yet, and then answers not_found, which says nothing of fencing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb, err := f.b.Sandbox(context.Background(), f.id)
		if err == nil && uint64(sb.LastEventID) >= ids[len(ids)-1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b does not see the sandbox a made (%v, %+v)", err, sb)
		}
		time.Sleep(5 * time.Millisecond) // a poll of the condition
	}
	return f
}

func (f *fenced) join(role string) (*natsstore.Store, *natscluster.Cluster) {
	f.t.Helper()
	s, err := natsstore.Open(context.Background(), f.url, natsstore.Options{Logger: slog.New(slog.DiscardHandler), Replicas: f.replicas})
	if err != nil {
		f.t.Fatal(err)
	}
	cl, err := natscluster.Join(context.Background(), s, natscluster.Options{
		Node: role + "-" + f.id, LeaseTTL: fenceTTL,
		Replicas: f.replicas, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		s.Close()
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		cl.Close()
		s.Close()
	})
	return s, cl
}

// mustClaim claims id for cl. A replicated stream just made may still be
// electing its leader, which the store answers as unavailable at once:
// the claim is made again until it is taken or refused otherwise.
func mustClaim(tb testing.TB, cl *natscluster.Cluster, id string) cluster.Claim {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := cl.Claim(context.Background(), id)
		if err == nil {
			return got
		}
		if !sandbox.IsType(err, sandbox.EUnavailable) || time.Now().After(deadline) {
			tb.Fatalf("%s claims %s: %v", cl.Node(), id, err)
		}
		time.Sleep(50 * time.Millisecond) // a poll of the stream's leader
	}
}

// takeOver removes a's registration, as when its process stayed paused
// past the TTL, and b takes the sandbox over. It returns b's fence.
func (f *fenced) takeOver() uint64 {
	f.t.Helper()
	ctx := context.Background()
	nodes, err := f.js.KeyValue(ctx, natscluster.DefaultNodeBucket)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := nodes.Delete(ctx, f.ca.Node()); err != nil {
		f.t.Fatal(err)
	}
	if got := mustClaim(f.t, f.cb, f.id); got.Owner != f.cb.Node() || !got.Taken {
		f.t.Fatalf("b's claim after a went away = %+v", got)
	}
	return f.lastFence()
}

// lastFence is the sequence of the sandbox's last fence.
func (f *fenced) lastFence() uint64 {
	f.t.Helper()
	stream, err := f.js.Stream(context.Background(), natsstore.DefaultStreamName)
	if err != nil {
		f.t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(context.Background(), natsstore.DefaultSubjectPrefix+"-fence."+f.id)
	if err != nil {
		f.t.Fatal(err)
	}
	return msg.Sequence
}

// mustRefuse checks that err is the typed refusal of a fenced append.
func mustRefuse(t *testing.T, err error) {
	t.Helper()
	var fe *natsstore.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, sandbox.ErrFenced) {
		t.Fatalf("append of the node that lost the sandbox: err = %v, want a *natsstore.FencedError matching sandbox.ErrFenced", err)
	}
}

// checkAfter checks, through b, that the log's ids increase, that every
// event after b's fence is one b appended, and that the state is
// consistent with the log.
func (f *fenced) checkAfter(fence uint64, byB []uint64) {
	f.t.Helper()
	ids := readIDs(f.t, f.b, f.id)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			f.t.Fatalf("ids not increasing: %v", ids)
		}
	}
	for _, id := range ids {
		if id > fence && !slices.Contains(byB, id) {
			f.t.Fatalf("event %d after b's fence %d is not b's (b appended %v; log %v)", id, fence, byB, ids)
		}
	}
	if err := f.b.Check(); err != nil {
		f.t.Fatal(err)
	}
}

// TestFence: a node whose lease moved to another node cannot append to the
// sandbox any more, whatever point of an append it was at when the lease
// moved: each refusal is a *FencedError, and nothing of it lands after the
// new holder's fence. On a single server (pipelined appends) and on a
// replicated stream (atomic batches).
func TestFence(t *testing.T) {
	t.Run("Single", func(t *testing.T) {
		url, _ := natstest.RunServer(t)
		testFence(t, url, 1)
	})
	t.Run("Replicated", func(t *testing.T) {
		c := natstest.RunCluster(t, 3)
		testFence(t, c.URL(), 3)
	})
}

func testFence(t *testing.T, url string, replicas int) {
	ctx := context.Background()
	t.Run("CachedState", func(t *testing.T) {
		// a writes on the state it holds, which still names it: its
		// publish expects a last sequence that the fence moved.
		f := newFenced(t, url, replicas)
		fence := f.takeOver()
		mustRefuse(t, f.a.Append(ctx, f.id, []*sandbox.Event{textEvent("late")}, nil))
		f.checkAfter(fence, mustAppend(t, f.b, f.id, textEvent("b1")))
	})
	t.Run("StateSeen", func(t *testing.T) {
		// a has seen b's takeover in the bucket before it writes.
		f := newFenced(t, url, replicas)
		moved := f.a.Wait(f.id)
		fence := f.takeOver()
		waitClosed(t, moved)
		mustRefuse(t, f.a.Append(ctx, f.id, []*sandbox.Event{textEvent("late")}, nil))
		f.checkAfter(fence, mustAppend(t, f.b, f.id, textEvent("b1")))
	})
	t.Run("BeforeCommit", func(t *testing.T) {
		// a's events are stored, and then a stops before its state update
		// while b takes over and ends the turn a started: a's events came
		// before the fence (b folded them), a's turn and state writes are
		// refused and do not undo b's.
		f := newFenced(t, url, replicas)
		var fence uint64
		var byB []uint64
		natsstore.SetHooks(f.a, nil, func(string) {
			fence = f.takeOver()
			byB = mustAppend(t, f.b, f.id, &sandbox.Event{Type: sandbox.TypeTurnCompleted, TurnID: "turn_late", TS: t0,
				Data: &sandbox.TurnCompleted{Status: sandbox.TurnFailed, StopReason: sandbox.StopError}})
		})
		started := &sandbox.Event{Type: sandbox.TypeTurnStarted, TurnID: "turn_late", TS: t0,
			Data: &sandbox.TurnStarted{Input: sandbox.TextInput("late")}}
		mustRefuse(t, f.a.Append(ctx, f.id, []*sandbox.Event{started}, func(st *sandbox.State) error {
			st.Sandbox.StatusDetail = "written by a"
			return nil
		}))
		natsstore.SetHooks(f.a, nil, nil)
		sb, err := f.b.Sandbox(ctx, f.id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.StatusDetail == "written by a" || sb.CurrentTurn != nil {
			t.Fatalf("a's write landed after b took over: %+v", sb)
		}
		if got, err := f.b.Turn(ctx, f.id, "turn_late"); err != nil || got.Status != sandbox.TurnFailed {
			t.Fatalf("the turn a started and b ended: %+v, %v", got, err)
		}
		f.checkAfter(fence, byB)
	})
	t.Run("MutateOnly", func(t *testing.T) {
		f := newFenced(t, url, replicas)
		var fence uint64
		natsstore.SetHooks(f.a, nil, func(string) { fence = f.takeOver() })
		mustRefuse(t, f.a.Append(ctx, f.id, nil, func(st *sandbox.State) error {
			st.Sandbox.StatusDetail = "written by a"
			return nil
		}))
		natsstore.SetHooks(f.a, nil, nil)
		if sb, _ := f.b.Sandbox(ctx, f.id); sb.StatusDetail == "written by a" {
			t.Fatal("a's mutate landed after b took over")
		}
		f.checkAfter(fence, nil)
	})
	t.Run("MidAppend", func(t *testing.T) {
		// b's fence goes up after a's first event went out and before the
		// others did: none of those lands after it.
		f := newFenced(t, url, replicas)
		before := f.lastLog()
		var fence uint64
		var once sync.Once
		natsstore.SetHooks(f.a, func(_ string, i int) {
			if i != 0 {
				return
			}
			once.Do(func() {
				if replicas == 1 {
					f.waitLog(before) // stored, on a single server, before the fence
				}
				fence = f.takeOver()
			})
		}, nil)
		mustRefuse(t, f.a.Append(ctx, f.id, []*sandbox.Event{textEvent("x"), textEvent("y"), textEvent("z")}, nil))
		natsstore.SetHooks(f.a, nil, nil)
		f.checkAfter(fence, mustAppend(t, f.b, f.id, textEvent("b1")))
	})
	t.Run("NeverHeld", func(t *testing.T) {
		// b never took the lease a holds: in a cluster, it may not write
		// the sandbox at all.
		f := newFenced(t, url, replicas)
		before := f.lastLog()
		mustRefuse(t, f.b.Append(ctx, f.id, []*sandbox.Event{textEvent("not mine")}, nil))
		if got := f.lastLog(); got != before {
			t.Fatalf("the log's last message moved from %d to %d", before, got)
		}
		mustAppend(t, f.a, f.id, textEvent("a3"))
	})
	t.Run("LapsedHere", func(t *testing.T) {
		// a learns that its leases lapsed and nobody took the sandbox: it
		// sends nothing.
		f := newFenced(t, url, replicas)
		nodes, err := f.js.KeyValue(ctx, natscluster.DefaultNodeBucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := nodes.Delete(ctx, f.ca.Node()); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ca.Renew(ctx); !errors.Is(err, cluster.ErrLeaseLost) {
			t.Fatalf("renew after the registration went: %v, want ErrLeaseLost", err)
		}
		before := f.lastLog()
		mustRefuse(t, f.a.Append(ctx, f.id, []*sandbox.Event{textEvent("late")}, nil))
		if got := f.lastLog(); got != before {
			t.Fatalf("the log's last message moved from %d to %d", before, got)
		}
	})
}

// lastLog is the sequence of the last message of the sandbox's log.
func (f *fenced) lastLog() uint64 {
	f.t.Helper()
	stream, err := f.js.Stream(context.Background(), natsstore.DefaultStreamName)
	if err != nil {
		f.t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(context.Background(), natsstore.DefaultSubjectPrefix+"."+f.id)
	if err != nil {
		f.t.Fatal(err)
	}
	return msg.Sequence
}

// waitLog waits until the log's last message is after before.
func (f *fenced) waitLog(before uint64) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.lastLog() <= before {
		if time.Now().After(deadline) {
			f.t.Fatal("the first event never reached the stream")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestFencesSeam: the store's side of fencing alone, driven as natscluster
// drives it. A hold's epoch is the sequence of its fence; the holder's
// appends go through while its hook says the leases hold, and are refused,
// sending nothing, once it does not; a process that holds no fence of a
// fenced sandbox may not write it; a newer hold elsewhere refuses the
// earlier holder; Lose ends a hold.
func TestFencesSeam(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	a, b := mustOpenChecked(t, url), mustOpenChecked(t, url)
	var aLeases atomic.Bool
	aLeases.Store(true)
	fa := a.Fences(aLeases.Load)
	fb := b.Fences(func() bool { return true })
	const id = "c_seam"
	lastOf := func(subject string) uint64 {
		t.Helper()
		stream, err := js.Stream(ctx, natsstore.DefaultStreamName)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Sequence
	}

	epoch, err := fa.Hold(ctx, id, []byte(`{"node":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if fence := lastOf(natsstore.DefaultSubjectPrefix + "-fence." + id); epoch != fence {
		t.Fatalf("Hold's epoch %d, want the fence's sequence %d", epoch, fence)
	}
	if !fa.Holding(id) || fb.Holding(id) {
		t.Fatalf("Holding: a %v, b %v; want a only", fa.Holding(id), fb.Holding(id))
	}
	mustCreate(t, a, id)
	last := mustAppend(t, a, id, textEvent("a1"))
	storetest.WaitHead(t, b, id, last[0])

	mustRefuse(t, b.Append(ctx, id, []*sandbox.Event{textEvent("b holds no fence")}, nil))

	aLeases.Store(false)
	before := lastOf(natsstore.DefaultSubjectPrefix + "." + id)
	mustRefuse(t, a.Append(ctx, id, []*sandbox.Event{textEvent("a's leases lapsed")}, nil))
	if got := lastOf(natsstore.DefaultSubjectPrefix + "." + id); got != before {
		t.Fatalf("an append after the leases lapsed sent something: the log's last message moved from %d to %d", before, got)
	}
	if fa.Holding(id) {
		t.Fatal("a still holds the sandbox after an append found its leases lapsed")
	}
	aLeases.Store(true)
	mustRefuse(t, a.Append(ctx, id, []*sandbox.Event{textEvent("a's hold is lost")}, nil))

	if _, err := fb.Hold(ctx, id, []byte(`{"node":"b"}`)); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, b, id, textEvent("b1"))
	fb.Lose(id)
	mustRefuse(t, b.Append(ctx, id, []*sandbox.Event{textEvent("b let go")}, nil))
}
