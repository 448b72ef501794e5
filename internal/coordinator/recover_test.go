package coordinator_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/bolttest"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// stateCounter is a store that records whose state was read and how often
// sandboxes were listed.
type stateCounter struct {
	*boltstore.Store
	mu     sync.Mutex
	read   map[string]int
	listed int
}

func (s *stateCounter) State(ctx context.Context, id string) (sandbox.State, error) {
	s.mu.Lock()
	s.read[id]++
	s.mu.Unlock()
	return s.Store.State(ctx, id)
}

func (s *stateCounter) Sandboxes(ctx context.Context, after string, limit int) ([]sandbox.Sandbox, bool, error) {
	s.mu.Lock()
	s.listed++
	s.mu.Unlock()
	return s.Store.Sandboxes(ctx, after, limit)
}

// listingOnly is a store that does not keep its unsettled sandboxes apart
// (as natsstore): recovery lists them all.
type listingOnly struct{ sandbox.Store }

// Recovery reads the state only of the sandboxes that are not settled (a
// current turn, or an agent that was running): a start costs what the
// sandboxes' metadata costs, not what their states hold. A store that
// keeps the unsettled ones apart is not listed at all.
func TestRecoverReadsOnlyOpenStates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(*stateCounter) sandbox.Store
		lists bool
	}{
		{"Unsettled", func(sc *stateCounter) sandbox.Store { return sc }, false},
		{"Listing", func(sc *stateCounter) sandbox.Store { return listingOnly{sc} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := openRecoverFixture(t)
			co, err := coordinator.New(coordinator.Config{Store: tc.store(sc), DataDir: t.TempDir(), FlushInterval: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close()
			if err := co.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := sc.listed > 0; got != tc.lists {
				t.Errorf("sandboxes listed %d times, want listed: %v", sc.listed, tc.lists)
			}
			for _, id := range []string{"c_1", "c_2", "c_3"} {
				if n := sc.read[id]; n != 0 {
					t.Errorf("%s (settled, no turn): state read %d times, want none", id, n)
				}
			}
			for _, id := range []string{"c_4", "c_5"} {
				if sc.read[id] == 0 {
					t.Errorf("%s: state never read, want it settled", id)
				}
			}
			st := sc.Store
			if sb, _ := st.Sandbox(context.Background(), "c_4"); sb.Status != sandbox.StatusStopped {
				t.Errorf("c_4 after recovery: %s, want stopped", sb.Status)
			}
			if sb, _ := st.Sandbox(context.Background(), "c_5"); sb.CurrentTurn != nil {
				t.Errorf("c_5 after recovery: current turn %+v, want none", sb.CurrentTurn)
			}
			if ids, err := st.Unsettled(context.Background()); err != nil || len(ids) != 0 {
				t.Errorf("unsettled after recovery: %q, %v; want none", ids, err)
			}
		})
	}
}

// openRecoverFixture makes five sandboxes as a server's stop leaves them:
// three settled, one whose agent was running and one stopped with a turn
// still open.
func openRecoverFixture(t *testing.T) *stateCounter {
	t.Helper()
	st := bolttest.MustOpenAt(t, filepath.Join(t.TempDir(), "sparkles.db"), boltstore.Options{})
	now := time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)
	statuses := map[string]string{
		"c_1": sandbox.StatusStopped, "c_2": sandbox.StatusFailed, "c_3": sandbox.StatusDeleted,
		"c_4": sandbox.StatusReady, "c_5": sandbox.StatusStopped,
	}
	for id, status := range statuses {
		sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: status, Agent: "demo", CreatedAt: now, UpdatedAt: now}
		if err := st.Create(context.Background(), sb, nil); err != nil {
			t.Fatal(err)
		}
	}
	// c_5 is stopped with a turn still open, as a crash mid-turn leaves it.
	err := st.Append(context.Background(), "c_5", []*sandbox.Event{{Type: sandbox.TypeTurnStarted, TS: now, SandboxID: "c_5", TurnID: "turn_1",
		Data: &sandbox.TurnStarted{Input: sandbox.TextInput("hi")}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &stateCounter{Store: st, read: map[string]int{}}
}

// A start removes the scratch sandboxes that agents checks left in the
// data dir when the server was stopped or killed during them, including a
// directory the check's agent made unwritable.
func TestRecoverRemovesCheckLeftovers(t *testing.T) {
	dir := t.TempDir()
	checks := datadir.Dir(dir).Checks()
	locked := filepath.Join(checks, "agent-abc", "work", "cache")
	if err := os.MkdirAll(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locked, "module"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(checks, "agent-abc", "agent.log"), []byte("booting\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep := datadir.Dir(dir).Sandbox("c_1").Work()
	if err := os.MkdirAll(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	st := bolttest.MustOpenAt(t, datadir.Dir(dir).Store(), boltstore.Options{})
	co, err := coordinator.New(coordinator.Config{Store: st, DataDir: dir, FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(checks); !os.IsNotExist(err) {
		t.Errorf("the checks' scratch sandboxes are still there after the start: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a sandbox's directory went with them: %v", err)
	}
}
