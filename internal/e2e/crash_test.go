package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// crashSeedVar reproduces a run of TestCrashConsistency: the test logs the
// seed it used. The seed fixes every choice of the test (prompts, decisions,
// reconnections, when each kill comes); the scheduling of the processes it
// kills stays the machine's.
const crashSeedVar = "SPARKLES_CRASH_SEED"

// observations are the durable frames every subscriber of every round
// received, by sandbox and id, and whatever broke the contract on the way.
type observations struct {
	mu         sync.Mutex
	seen       map[string]map[uint64][]byte
	violations []string
	frames     int
}

func newObservations() *observations {
	return &observations{seen: map[string]map[uint64][]byte{}}
}

func (o *observations) violate(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.violations) < 50 {
		o.violations = append(o.violations, fmt.Sprintf(format, args...))
	}
}

// record notes a durable frame; the same id must always carry the same bytes.
func (o *observations) record(sb string, id uint64, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.frames++
	m := o.seen[sb]
	if m == nil {
		m = map[uint64][]byte{}
		o.seen[sb] = m
	}
	if prev, ok := m[id]; ok {
		if !bytes.Equal(prev, data) {
			o.violations = append(o.violations, fmt.Sprintf("%s: id %d was seen with two different events:\n  %s\n  %s", sb, id, prev, data))
		}
		return
	}
	m[id] = data
}

// crashPrompts are what the drivers ask the demo agent, in turn.
var crashPrompts = []string{"hello", "slow", "please write f.txt", "slow, then write g.txt", "read README.md"}

// subscriber follows one sandbox's stream across connections. As a driver
// it also keeps the sandbox busy: it starts a turn whenever none runs and
// decides every approval it sees, on the state of the snapshot and the
// live tail after it.
type subscriber struct {
	p      *serveProc
	id     string
	obs    *observations
	rng    *rand.Rand
	driver bool
	cursor *uint64 // the last durable id received, nil before any
	turns  int
}

// run reads connection after connection until ctx ends. A plain
// subscriber drops each connection after a random number of frames.
func (s *subscriber) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		var se *statusError
		if errors.As(err, &se) {
			// A cursor this subscriber got from the server itself must
			// never be refused: it was durable when it was sent.
			s.obs.violate("%s: reconnecting after %v: %v", s.id, deref(s.cursor), err)
			return
		}
		t := time.NewTimer(time.Duration(5+s.rng.IntN(20)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func deref(p *uint64) any {
	if p == nil {
		return "no cursor"
	}
	return *p
}

func (s *subscriber) connect(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := openStream(ctx, s.p.streams, s.p.url, s.p.token, s.id, s.cursor)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fr := newSSEFrames(resp.Body)
	budget := -1
	if !s.driver {
		budget = 1 + s.rng.IntN(60)
	}
	var snapLast uint64
	first := true
	for budget != 0 {
		f, err := fr.next()
		if err != nil {
			return err
		}
		budget--
		if f.event == string(sandbox.TypeSnapshot) || f.event == string(sandbox.TypeSandboxStatus) {
			if f.id != "" {
				s.obs.violate("%s: %s frame with id %q", s.id, f.event, f.id)
			}
			if f.event == string(sandbox.TypeSnapshot) {
				var ev sandbox.Event
				if err := json.Unmarshal(f.data, &ev); err != nil {
					s.obs.violate("%s: snapshot does not decode: %v", s.id, err)
					return err
				}
				snap := ev.Data.(*sandbox.Snapshot)
				snapLast = uint64(snap.LastEventID)
				if s.driver {
					s.steer(ctx, snap)
				}
			}
			continue
		}
		id, err := strconv.ParseUint(f.id, 10, 64)
		if err != nil || id == 0 {
			s.obs.violate("%s: durable %s frame with id %q", s.id, f.event, f.id)
			return errors.New("bad id")
		}
		if s.cursor != nil && id <= *s.cursor {
			s.obs.violate("%s: id %d after %d (first frame of a connection: %v)", s.id, id, *s.cursor, first)
		}
		first = false
		s.obs.record(s.id, id, f.data)
		s.cursor = &id
		if s.driver && id > snapLast {
			s.react(ctx, f)
		}
	}
	return nil
}

// steer acts on a snapshot: decide what is pending, start a turn if none runs.
func (s *subscriber) steer(ctx context.Context, snap *sandbox.Snapshot) {
	for _, a := range snap.Approvals {
		s.decide(ctx, a.ApprovalID)
	}
	if snap.Sandbox.CurrentTurn == nil {
		s.startTurn(ctx)
	}
}

// react acts on a live event.
func (s *subscriber) react(ctx context.Context, f frame) {
	switch sandbox.Type(f.event) {
	case sandbox.TypeApprovalRequested:
		var ev sandbox.Event
		if err := json.Unmarshal(f.data, &ev); err == nil {
			s.decide(ctx, ev.Data.(*sandbox.ApprovalRequested).ApprovalID)
		}
	case sandbox.TypeTurnCompleted:
		s.startTurn(ctx)
	}
}

func (s *subscriber) decide(ctx context.Context, approvalID string) {
	decision := "approve"
	if s.rng.IntN(3) == 0 {
		decision = "deny"
	}
	// Errors are expected: the server may die under the request, or a
	// restart may have resolved the approval already.
	_, _ = s.p.call(ctx, http.MethodPost, "/v1/sandboxes/"+s.id+"/approvals/"+approvalID, map[string]string{"decision": decision}, nil)
}

func (s *subscriber) startTurn(ctx context.Context) {
	prompt := crashPrompts[s.rng.IntN(len(crashPrompts))]
	if status, err := s.p.call(ctx, http.MethodPost, "/v1/sandboxes/"+s.id+"/turns", map[string]string{"input": prompt}, nil); err == nil && status == http.StatusAccepted {
		s.turns++
	}
}

// TestCrashConsistency runs the real server under load and kills it with
// SIGKILL at random moments, round after round on the same data dir. What
// any subscriber ever received must be in the log with the same bytes, ids
// must never be reused, every turn and approval must be settled exactly
// once, and the file must pass bbolt's check.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the server for about twenty seconds")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(crashSeedVar); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", crashSeedVar, v, err)
		}
	}
	t.Logf("seed %d; rerun with %s=%d", seed, crashSeedVar, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	const (
		rounds      = 40
		sandboxes   = 3
		subscribers = 2 // plain ones per sandbox, beside its driver
	)
	dataDir := t.TempDir()
	env := cliEnv(t)
	const token = "crash-test-token"
	obs := newObservations()
	var ids []string
	cursors := map[string]*uint64{} // the drivers' cursors, kept across rounds
	turns := 0

	for round := range rounds {
		p := startServe(t, env, dataDir, token, "--flush-interval", "5ms")
		if round > 0 && rng.IntN(8) == 0 {
			// Now and then the crash comes during start-up and recovery.
			early := time.NewTimer(time.Duration(rng.IntN(40)) * time.Millisecond)
			select {
			case <-early.C:
			case <-p.serving:
			}
			p.kill()
			continue
		}
		p.waitServing()
		if round == 0 {
			for range sandboxes {
				var sb sandbox.Sandbox
				p.mustCall(http.MethodPost, "/v1/sandboxes", map[string]any{}, http.StatusCreated, &sb)
				ids = append(ids, sb.ID)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var drivers []*subscriber
		for _, id := range ids {
			d := &subscriber{p: p, id: id, obs: obs, rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), driver: true, cursor: cursors[id]}
			drivers = append(drivers, d)
			for i := range subscribers + 1 {
				s := d
				if i > 0 {
					s = &subscriber{p: p, id: id, obs: obs, rng: rand.New(rand.NewPCG(rng.Uint64(), 2))}
					if rng.IntN(2) == 0 {
						s.cursor = new(uint64) // since 0: the whole log first
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.run(ctx)
				}()
			}
		}
		crash := time.NewTimer(time.Duration(50+rng.IntN(750)) * time.Millisecond)
		<-crash.C
		p.kill()
		cancel()
		wg.Wait()
		for _, d := range drivers {
			cursors[d.id] = d.cursor
			turns += d.turns
		}
	}

	// A last clean run settles what the last crash left open; then the
	// server stops as it should.
	p := startServe(t, env, dataDir, token)
	p.waitServing()
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, p.logTail())
	}

	st := bolttest.MustOpenAt(t, filepath.Join(dataDir, "sparkles.db"), boltstore.Options{})
	defer st.Close()
	if err := st.Check(); err != nil {
		t.Errorf("bbolt check: %v", err)
	}
	stats := checkCrashLog(t, st, ids, obs)
	t.Logf("%d rounds, %d frames received, %d turns accepted; the log holds %d events, %d turns, %d approvals, %d turns completed by a restart; %d events seen were compacted since",
		rounds, obs.frames, turns, stats.events, stats.turns, stats.approvals, stats.restarted, stats.compacted)
	for _, v := range obs.violations {
		t.Error(v)
	}
	if stats.turns < rounds || obs.frames == 0 {
		t.Fatalf("only %d turns and %d frames: the load did not run, so the test proves nothing", stats.turns, obs.frames)
	}
}

type crashStats struct {
	events, turns, approvals, restarted, compacted int
}

// compacted reports whether an event missing from the log is one retention
// may remove (docs/retention.md): a message.updated of a finished turn superseded by a
// later one of the same part that the log still holds.
func compacted(data []byte, id uint64, lastOfPart map[string]uint64, completed map[string]int) bool {
	var ev sandbox.Event
	if json.Unmarshal(data, &ev) != nil || ev.Type != sandbox.TypeMessageUpdated {
		return false
	}
	d := ev.Data.(*sandbox.MessageUpdated)
	return lastOfPart[d.PartID] > id && completed[ev.TurnID] == 1
}

// checkCrashLog reads every log from the file and checks it against the
// contract and against what the subscribers saw.
func checkCrashLog(t *testing.T, st *boltstore.Store, ids []string, obs *observations) crashStats {
	t.Helper()
	var stats crashStats
	ctx := context.Background()
	for _, id := range ids {
		logged := map[uint64][]byte{}
		var last uint64
		started, completed := map[string]int{}, map[string]int{}
		requested, resolved := map[string]int{}, map[string]int{}
		lastOfPart := map[string]uint64{} // part_id -> id of its last message.updated
		for {
			recs, err := st.Read(ctx, id, last, 1000)
			if err != nil {
				t.Fatalf("read %s after %d: %v", id, last, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				if r.ID <= last {
					t.Errorf("%s: id %d after %d in the log", id, r.ID, last)
				}
				last = r.ID
				logged[r.ID] = r.JSON
				stats.events++
				ev, err := r.Decode()
				if err != nil {
					t.Fatalf("%s: event %d does not decode: %v", id, r.ID, err)
				}
				switch d := ev.Data.(type) {
				case *sandbox.TurnStarted:
					started[ev.TurnID]++
				case *sandbox.TurnCompleted:
					completed[ev.TurnID]++
					if d.Error != nil && d.Error.Code == sandbox.ErrCoordinatorRestarted {
						stats.restarted++
					}
				case *sandbox.ApprovalRequested:
					requested[d.ApprovalID]++
				case *sandbox.ApprovalResolved:
					resolved[d.ApprovalID]++
				case *sandbox.MessageUpdated:
					lastOfPart[d.PartID] = r.ID
				}
			}
		}
		for turn, n := range started {
			if n != 1 || completed[turn] != 1 {
				t.Errorf("%s: turn %s started %d times and completed %d times", id, turn, n, completed[turn])
			}
		}
		for turn, n := range completed {
			if started[turn] == 0 {
				t.Errorf("%s: turn %s completed %d times, never started", id, turn, n)
			}
		}
		for appr, n := range requested {
			if n != 1 || resolved[appr] != 1 {
				t.Errorf("%s: approval %s requested %d times and resolved %d times", id, appr, n, resolved[appr])
			}
		}
		for appr, n := range resolved {
			if requested[appr] == 0 {
				t.Errorf("%s: approval %s resolved %d times, never requested", id, appr, n)
			}
		}
		stats.turns += len(started)
		stats.approvals += len(requested)
		obs.mu.Lock()
		missing := 0
		for seenID, data := range obs.seen[id] {
			got, ok := logged[seenID]
			switch {
			case !ok && compacted(data, seenID, lastOfPart, completed):
				stats.compacted++
			case !ok:
				missing++
				if missing <= 5 {
					t.Errorf("%s: id %d was sent to a subscriber but is not in the log: %s", id, seenID, data)
				}
			case !bytes.Equal(got, data):
				t.Errorf("%s: id %d was sent as\n  %s\nbut the log has\n  %s", id, seenID, data, got)
			}
		}
		obs.mu.Unlock()
		if missing > 0 {
			t.Errorf("%s: %d ids sent to subscribers are not in the log", id, missing)
		}
	}
	return stats
}
