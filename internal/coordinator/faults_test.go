package coordinator_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/internal/registry"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// heapBound is how much the coordinator's heap may grow while one faulty
// agent does its worst: well above what the bounded buffers need (one line
// of agent.DefaultMaxLine, a part of translate.MaxPartBytes), far below what
// buffering the agent's output would take.
const heapBound = 64 << 20

// buildFaultAgent builds internal/faultagent into dir.
func buildFaultAgent(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "faultagent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sparkles-dev/sparkles/internal/faultagent").CombinedOutput()
	if err != nil {
		t.Fatalf("build faultagent: %v\n%s", err, out)
	}
	return bin
}

// faultRig is a coordinator with two sandboxes: one runs a faulty agent,
// the other the demo agent, whose turns must not notice the fault.
type faultRig struct {
	*env
	faulty, healthy sandbox.Sandbox
}

func newFaultRig(t *testing.T, bin string, argv []string, tweak func(*coordinator.Config)) *faultRig {
	t.Helper()
	e := newEnv(t, func(c *coordinator.Config) {
		c.Agents["fault"] = registry.Agent{Command: bin, Args: argv}
		if tweak != nil {
			tweak(c)
		}
	})
	r := &faultRig{env: e}
	r.healthy = e.create(sandbox.CreateParams{Agent: "demo"})
	e.waitStatus(r.healthy.ID, sandbox.StatusReady)
	r.faulty = e.create(sandbox.CreateParams{Agent: "fault"})
	return r
}

// startHealthy starts a turn on the healthy sandbox; the returned func
// waits for it and fails the test unless it succeeded with a reply.
func (r *faultRig) startHealthy(prompt string) func() {
	r.t.Helper()
	turn, err := r.co.StartTurn(context.Background(), r.healthy.ID, prompt)
	if err != nil {
		r.t.Fatalf("healthy sandbox: %v", err)
	}
	return func() {
		r.t.Helper()
		evs := r.waitFor(r.healthy.ID, 0, turnCompleted(turn.ID))
		c := completed(evs)
		if c.Status != sandbox.TurnSucceeded {
			r.t.Fatalf("the healthy sandbox's turn = %+v; events %s", c, types(evs))
		}
		var reply string
		for _, ev := range evs {
			if d, ok := ev.Data.(*sandbox.MessageCompleted); ok && ev.TurnID == turn.ID {
				reply = d.Text
			}
		}
		if !strings.Contains(reply, "That is all from the demo agent.") {
			r.t.Fatalf("the healthy sandbox's reply is cut: %q", reply)
		}
	}
}

// faultyTurn starts a turn on the faulty sandbox and returns every event of
// the log up to its turn.completed.
func (r *faultRig) faultyTurn(prompt string, during func(turn sandbox.Turn)) []sandbox.Event {
	r.t.Helper()
	turn, err := r.co.StartTurn(context.Background(), r.faulty.ID, prompt)
	if err != nil {
		r.t.Fatalf("faulty sandbox: %v", err)
	}
	if during != nil {
		during(turn)
	}
	return r.waitFor(r.faulty.ID, 0, turnCompleted(turn.ID))
}

func turnCompleted(turnID string) func(sandbox.Event) bool {
	return func(ev sandbox.Event) bool { return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turnID }
}

func sandboxError(evs []sandbox.Event) *sandbox.SandboxError {
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok {
			return d
		}
	}
	return nil
}

// wantFailed checks the turn failed with a sandbox.error of code before it.
func wantFailed(t *testing.T, evs []sandbox.Event, code, turnCode string) {
	t.Helper()
	if e := sandboxError(evs); e == nil || e.Code != code {
		t.Fatalf("sandbox.error = %+v, want code %s; events %s", e, code, types(evs))
	}
	c := completed(evs)
	if c == nil || c.Status != sandbox.TurnFailed || c.StopReason != sandbox.StopError || c.Error == nil || c.Error.Code != turnCode {
		t.Fatalf("turn.completed = %+v, want failed with %s; events %s", c, turnCode, types(evs))
	}
	if got := strings.Count(types(evs), string(sandbox.TypeTurnCompleted)); got != 1 {
		t.Fatalf("%d turn.completed, want 1", got)
	}
}

// noPathLeak checks that no sandbox.error message names the agent binary:
// messages are written for people, never paths outside the sandbox.
func noPathLeak(t *testing.T, evs []sandbox.Event, bin string) {
	t.Helper()
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.SandboxError); ok && strings.Contains(d.Message, filepath.Dir(bin)) {
			t.Fatalf("sandbox.error message names a path outside the sandbox: %q", d.Message)
		}
	}
}

// follow reads the log of id from the start, one page at a time, handing
// each event of the given types to done until it returns true, and keeps
// nothing itself.
func (r *faultRig) follow(id string, only []sandbox.Type, done func(sandbox.Event) bool) {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	var after uint64
	for {
		ch := r.store.Wait(id)
		recs, err := r.store.Read(context.Background(), id, after, 100)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, rec := range recs {
			after = rec.ID
			if !slices.Contains(only, rec.Type) {
				continue
			}
			ev, err := rec.Decode()
			if err != nil {
				r.t.Fatal(err)
			}
			if done(ev) {
				return
			}
		}
		if len(recs) > 0 {
			continue
		}
		select {
		case <-ch:
		case <-deadline:
			r.t.Fatalf("timed out reading the log of %s after event %d", id, after)
		}
	}
}

// heapWatch samples the heap in use until stop, returning how far it rose
// above where it was at the start.
func heapWatch() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak - min(base, peak)
	}
}

// TestFaults runs agents that fail in every way the coordinator must
// survive. Each ends its own turn the way the contract says, while a demo
// agent's turn on another sandbox of the same coordinator succeeds.
func TestFaults(t *testing.T) {
	bin := buildFaultAgent(t, t.TempDir())

	// The heap is measured with nothing else running in this process, so
	// these two go first and alone; the rest run in parallel afterwards.
	t.Run("LongLine", func(t *testing.T) {
		r := newFaultRig(t, bin, []string{"longline", "100"}, nil)
		stop := heapWatch()
		healthy := r.startHealthy("slow hello")
		evs := r.faultyTurn("hello", nil)
		grew := stop()
		wantFailed(t, evs, sandbox.ErrProtocol, sandbox.ErrAgentExited)
		noPathLeak(t, evs, bin)
		t.Logf("heap grew %d MiB at most while the agent sent a 100 MiB line", grew>>20)
		if grew > heapBound {
			t.Fatalf("heap grew %d MiB, bound %d MiB", grew>>20, heapBound>>20)
		}
		r.waitStatus(r.faulty.ID, sandbox.StatusStopped)
		healthy()
	})
	t.Run("Flood", func(t *testing.T) {
		const chunks = 20000
		// The default flush interval of serve: at 5 ms a part of hundreds of
		// KiB is stored (and cached by the store) hundreds of times.
		r := newFaultRig(t, bin, []string{"flood", strconv.Itoa(chunks)}, func(c *coordinator.Config) { c.FlushInterval = 50 * time.Millisecond })
		stop := heapWatch()
		healthy := r.startHealthy("slow hello")
		turn, err := r.co.StartTurn(context.Background(), r.faulty.ID, "hello")
		if err != nil {
			t.Fatal(err)
		}
		// Only what is checked is kept: the test's own memory counts too.
		var c sandbox.TurnCompleted
		var text string
		r.follow(r.faulty.ID, []sandbox.Type{sandbox.TypeMessageCompleted, sandbox.TypeTurnCompleted}, func(ev sandbox.Event) bool {
			switch d := ev.Data.(type) {
			case *sandbox.MessageCompleted:
				text = d.Text
			case *sandbox.TurnCompleted:
				c = *d
			}
			return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turn.ID
		})
		grew := stop()
		if c.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn.completed = %+v", c)
		}
		if got, want := len(strings.Fields(text)), chunks; got != want {
			t.Fatalf("message.completed has %d words, want %d", got, want)
		}
		if !strings.HasSuffix(text, "w19999 ") {
			t.Fatalf("message.completed ends %q", text[max(0, len(text)-20):])
		}
		t.Logf("heap grew %d MiB at most over %d chunks", grew>>20, chunks)
		if grew > heapBound {
			t.Fatalf("heap grew %d MiB, bound %d MiB", grew>>20, heapBound>>20)
		}
		healthy()
	})

	t.Run("NeverInitializes", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"silent"}, func(c *coordinator.Config) { c.BootTimeout = 2 * time.Second })
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgentStartFailed, sandbox.ErrAgentStartFailed)
		noPathLeak(t, evs, bin)
		if got, want := squash(evs), "sandbox.error turn.started turn.completed"; got != want {
			t.Fatalf("events %s, want %s", got, want)
		}
		r.waitStatus(r.faulty.ID, sandbox.StatusFailed)
		healthy()
	})
	t.Run("CrashesDuringBoot", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"boot-crash"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgentStartFailed, sandbox.ErrAgentStartFailed)
		noPathLeak(t, evs, bin)
		r.waitStatus(r.faulty.ID, sandbox.StatusFailed)
		healthy()
	})
	t.Run("CrashesMidTurn", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"turn-crash"}, nil)
		r.waitStatus(r.faulty.ID, sandbox.StatusReady)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgentExited, sandbox.ErrAgentExited)
		if tool := lastTool(evs); tool == nil || tool.Status != sandbox.ToolFailed {
			t.Fatalf("the running tool was left %+v, want failed", tool)
		}
		r.waitStatus(r.faulty.ID, sandbox.StatusStopped)
		healthy()
	})
	t.Run("HangsMidTurn", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"turn-hang"}, func(c *coordinator.Config) { c.TurnTimeout = 2 * time.Second })
		r.waitStatus(r.faulty.ID, sandbox.StatusReady)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrTurnTimeout, sandbox.ErrTurnTimeout)
		r.waitStatus(r.faulty.ID, sandbox.StatusStopped)
		healthy()
	})
	t.Run("GarbageLinesTolerated", func(t *testing.T) {
		// agent.Conn tolerates lines that are not JSON-RPC as long as no
		// more than 100 come in a row: launchers print banners on stdout.
		t.Parallel()
		r := newFaultRig(t, bin, []string{"garbage"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		if c := completed(evs); c.Status != sandbox.TurnSucceeded {
			t.Fatalf("turn.completed = %+v; events %s", c, types(evs))
		}
		var text string
		for _, ev := range evs {
			if d, ok := ev.Data.(*sandbox.MessageCompleted); ok {
				text = d.Text
			}
		}
		if got, want := text, "part 0 part 1 part 2 part 3 part 4 part 5 "; got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
		healthy()
	})
	t.Run("NothingButGarbage", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"noise"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrProtocol, sandbox.ErrAgentExited)
		r.waitStatus(r.faulty.ID, sandbox.StatusStopped)
		healthy()
	})
	t.Run("PermissionAfterCancel", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"late-permission"}, nil)
		healthy := r.startHealthy("hello")
		var canceledAt uint64
		evs := r.faultyTurn("hello", func(turn sandbox.Turn) {
			got := r.waitFor(r.faulty.ID, 0, isType(sandbox.TypeMessageUpdated))
			canceledAt = got[len(got)-1].ID
			if _, err := r.co.CancelTurn(context.Background(), r.faulty.ID, turn.ID); err != nil {
				t.Fatal(err)
			}
		})
		if c := completed(evs); c.Status != sandbox.TurnCanceled || c.StopReason != sandbox.StopCanceled {
			t.Fatalf("turn.completed = %+v", c)
		}
		for _, ev := range evs {
			if ev.ID > canceledAt && (ev.Type == sandbox.TypeApprovalRequested || ev.Type == sandbox.TypeApprovalResolved) {
				t.Fatalf("%s after the cancel; events %s", ev.Type, types(evs))
			}
		}
		raw, err := os.ReadFile(filepath.Join(datadir.Dir(r.dir).Sandbox(r.faulty.ID).Work(), "permission-outcome.json"))
		if err != nil {
			t.Fatalf("the agent got no answer to its permission request: %v", err)
		}
		var answer struct {
			Outcome struct {
				Outcome string `json:"outcome"`
			} `json:"outcome"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil || answer.Outcome.Outcome != "cancelled" {
			t.Fatalf("the late permission request was answered %s, want outcome cancelled", raw)
		}
		healthy()
	})
	t.Run("ExitsWithPendingApproval", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"exit-pending"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgentExited, sandbox.ErrAgentExited)
		appr := approvalOf(evs)
		if appr == nil {
			t.Fatalf("no approval.requested; events %s", types(evs))
		}
		var resolved []*sandbox.ApprovalResolved
		for _, ev := range evs {
			if d, ok := ev.Data.(*sandbox.ApprovalResolved); ok {
				resolved = append(resolved, d)
			}
		}
		if len(resolved) != 1 || resolved[0].ApprovalID != appr.ApprovalID ||
			resolved[0].Decision != sandbox.DecisionFailed || resolved[0].Reason != sandbox.ReasonAgentExited {
			t.Fatalf("approval.resolved = %+v, want one failed/agent_exited", resolved)
		}
		_, err := r.co.Decide(context.Background(), r.faulty.ID, appr.ApprovalID, sandbox.Decision{Decision: "approve"})
		if got, want := sandbox.ErrorType(err), sandbox.EApprovalResolved; got != want {
			t.Fatalf("deciding the failed approval: %v, want %s", err, want)
		}
		healthy()
	})
	t.Run("NeedsCredentials", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"auth-required"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgentStartFailed, sandbox.ErrAgentStartFailed)
		sb := r.waitStatus(r.faulty.ID, sandbox.StatusFailed)
		const want = "the agent needs credentials (it offers: oauth-personal, gemini-api-key)"
		if !strings.Contains(sb.StatusDetail, want) || !strings.Contains(sandboxError(evs).Message, want) {
			t.Fatalf("status_detail %q and sandbox.error %q, want both to say %q", sb.StatusDetail, sandboxError(evs).Message, want)
		}
		healthy()
	})
	t.Run("PromptRefused", func(t *testing.T) {
		t.Parallel()
		r := newFaultRig(t, bin, []string{"prompt-error"}, nil)
		healthy := r.startHealthy("hello")
		evs := r.faultyTurn("hello", nil)
		wantFailed(t, evs, sandbox.ErrAgent, sandbox.ErrAgent)
		if got := sandboxError(evs).Message; !strings.Contains(got, "API Error: 400") || !strings.Contains(got, "prompt is too long") {
			t.Fatalf("sandbox.error message %q, want the agent's reason", got)
		}
		// Refusing a prompt is no crash: the same agent takes the next one.
		r.waitStatus(r.faulty.ID, sandbox.StatusReady)
		healthy()
	})
	t.Run("StopOnDelete", func(t *testing.T) {
		t.Parallel()
		// Outside the sandbox: the delete removes its work dir.
		stopLog := filepath.Join(t.TempDir(), "stop-log.txt")
		r := newFaultRig(t, bin, []string{"stop-log", stopLog}, nil)
		turn, err := r.co.StartTurn(context.Background(), r.faulty.ID, "hello")
		if err != nil {
			t.Fatal(err)
		}
		r.waitFor(r.faulty.ID, 0, isType(sandbox.TypeApprovalRequested))
		if _, err := r.co.DeleteSandbox(context.Background(), r.faulty.ID); err != nil {
			t.Fatal(err)
		}
		// Delete returns once the agent is gone, and it wrote each line
		// before it read on.
		raw, err := os.ReadFile(stopLog)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(raw), "session/cancel\nanswer cancelled\neof\n"; got != want {
			t.Fatalf("the agent saw %q, want %q", got, want)
		}
		if c := completed(r.waitFor(r.faulty.ID, 0, turnCompleted(turn.ID))); c.Status != sandbox.TurnCanceled {
			t.Fatalf("turn.completed = %+v, want canceled", c)
		}
	})
}
