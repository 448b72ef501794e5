package coordinator_test

import (
	"context"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/faultstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The store outages: a store that refuses writes for a while (a full disk,
// a store that does not answer) and then takes them again. Whatever the
// coordinator did meanwhile, the log must end up as if nothing had been
// lost: every accepted turn starts and ends there once, and the requests
// made during the outage are refused, not half done; a delete alone is
// done at once and recorded when the store heals (disk_test.go).

// TestStoreOutage: a turn streams while the store begins to refuse writes.
// The turn is stopped, the requests made meanwhile are answered
// unavailable and change nothing, reads keep answering from what is
// durable, and once the store heals the events that waited land once and
// in order, the turn ends failed (internal) exactly once, and the sandbox
// takes turns again, all without a restart.
func TestStoreOutage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		reason string
	}{
		{"DiskFull", faultstore.ErrDiskFull, "disk full"},
		{"Unreachable", faultstore.ErrUnreachable, "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOutageEnv(t, nil)
			ctx := context.Background()
			sb := o.create(sandbox.CreateParams{})
			// idle has nothing to write during the outage: what it is
			// asked is refused because the store refuses writes, not
			// because its own writes wait.
			idle := o.create(sandbox.CreateParams{})
			o.waitStatus(sb.ID, sandbox.StatusReady)
			o.waitStatus(idle.ID, sandbox.StatusReady)
			r := o.watch(sb.ID)
			turn := o.startTurn(sb.ID, "slow")
			o.waitFor(sb.ID, 0, func(ev sandbox.Event) bool {
				return ev.Type == sandbox.TypeMessageUpdated && ev.TurnID == turn.ID
			})

			o.fs.Fail(tc.err)
			o.obs.unhealthy(t)
			wantUnavailable(t, "Writable", o.co.Writable(), tc.reason)
			for _, id := range []string{sb.ID, idle.ID} {
				_, err := o.co.StartTurn(ctx, id, "hello")
				wantUnavailable(t, "a new turn", err, tc.reason)
				_, err = o.co.CancelTurn(ctx, id, turn.ID)
				wantUnavailable(t, "a cancel", err, tc.reason)
				_, err = o.co.Decide(ctx, id, "appr_none", sandbox.Decision{Decision: "approve"})
				wantUnavailable(t, "a decision", err, tc.reason)
				// A delete is taken all the same: TestDeleteDuringOutage.
			}
			_, err := o.co.CreateSandbox(ctx, sandbox.CreateParams{})
			wantUnavailable(t, "a create", err, tc.reason)

			// Reads answer from what is durable: the turn still runs there.
			got, err := o.co.Turn(ctx, sb.ID, turn.ID)
			if err != nil || got.Status != sandbox.TurnRunning {
				t.Fatalf("GET turn during the outage = %+v, %v; want it running, as the log has it", got, err)
			}
			if cur, err := o.fs.Sandbox(ctx, sb.ID); err != nil || cur.Status != sandbox.StatusReady {
				t.Fatalf("GET sandbox during the outage = %+v, %v", cur, err)
			}
			if list, _, err := o.fs.Sandboxes(ctx, "", 10); err != nil || len(list) != 2 {
				t.Fatalf("list during the outage = %d sandboxes, %v; want the two", len(list), err)
			}

			o.fs.Heal()
			evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
			wantStoreStopped(t, evs, turn.ID)
			o.obs.settled(t)
			if err := o.co.Writable(); err != nil {
				t.Fatalf("Writable after the heal: %v", err)
			}
			if got, err := o.co.Turn(ctx, sb.ID, turn.ID); err != nil || got.Status != sandbox.TurnFailed {
				t.Fatalf("GET turn after the heal = %+v, %v; want it failed", got, err)
			}

			// The sandbox goes on: a new turn boots the agent again.
			next := o.startTurn(sb.ID, "hello")
			done := o.waitFor(sb.ID, 0, turnCompleted(next.ID))
			if c := completed(done[len(done)-1:]); c.Status != sandbox.TurnSucceeded {
				t.Fatalf("the turn after the heal: %+v", c)
			}
			evs = o.checkLog(sb.ID, r, turn.ID, next.ID)
			o.wantRetriedOnce(evs)
			if got, err := o.fs.Sandbox(ctx, idle.ID); err != nil || got.Status != sandbox.StatusReady || got.CurrentTurn != nil {
				t.Fatalf("the idle sandbox after the outage: %+v, %v; want it as it was", got, err)
			}
			o.checkLog(idle.ID, nil)
			o.obs.wait(t, "the refusals and retries are counted", func(o *storeObserver) bool {
				return o.failed > 0 && o.retried > 0 && o.turns[sandbox.TurnFailed] == 1
			})
		})
	}
}

// TestStoreOutageQueuedTurn: a turn accepted while the agent boots, whose
// turn.started the store refuses when the agent is ready. The turn was
// answered 202, so it must reach the log: GET answers it from what is
// durable (queued) during the outage, and after the heal the log has its
// turn.started and its one turn.completed.
//
// Only: the store refuses the turn.started alone and takes every other
// write, as a disk with room for small commits only does; what comes
// after the refused write must still wait behind it, or the log would
// end the turn before starting it.
func TestStoreOutageQueuedTurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(fs *faultstore.Store, err error, m faultstore.Match)
	}{
		{"From", (*faultstore.Store).FailFrom},
		{"Only", (*faultstore.Store).FailOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := make(chan struct{})
			o := newOutageEnv(t, func(c *coordinator.Config) {
				c.Builtins = map[string]coordinator.BuiltinAgent{"gated": gatedAgent(open)}
			})
			ctx := context.Background()
			sb := o.create(sandbox.CreateParams{Agent: "gated"})
			r := o.watch(sb.ID)
			turn := o.startTurn(sb.ID, "hello")
			if turn.Status != sandbox.TurnQueued {
				t.Fatalf("turn posted while booting is %s, want queued", turn.Status)
			}
			tc.fail(o.fs, faultstore.ErrDiskFull, faultstore.HasType(sandbox.TypeTurnStarted))
			close(open)
			o.obs.unhealthy(t)
			got, err := o.co.Turn(ctx, sb.ID, turn.ID)
			if err != nil || got.ID != turn.ID {
				t.Fatalf("GET of the accepted turn during the outage = %+v, %v", got, err)
			}
			_, err = o.co.StartTurn(ctx, sb.ID, "again")
			wantUnavailable(t, "a second turn", err, "disk full")

			o.fs.Heal()
			evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
			wantStoreStopped(t, evs, turn.ID)
			o.obs.settled(t)
			evs = o.checkLog(sb.ID, r, turn.ID)
			o.wantRetriedOnce(evs)
		})
	}
}

// TestStoreOutageRefusedWrite: requests whose own write the store refuses
// while nothing else waits. A turn whose turn.started is refused is
// answered unavailable and leaves no trace (the sandbox takes the next turn
// as if it had never been asked); a create refused on an empty store
// creates nothing. The store's health comes back by itself: with nothing
// waiting to be retried, the coordinator probes it.
func TestStoreOutageRefusedWrite(t *testing.T) {
	t.Run("Turn", func(t *testing.T) {
		o := newOutageEnv(t, nil)
		ctx := context.Background()
		sb := o.create(sandbox.CreateParams{})
		ready := o.waitStatus(sb.ID, sandbox.StatusReady)
		r := o.watch(sb.ID)
		o.fs.FailFrom(faultstore.ErrUnreachable, faultstore.HasType(sandbox.TypeTurnStarted))
		_, err := o.co.StartTurn(ctx, sb.ID, "hello")
		wantUnavailable(t, "a turn whose turn.started is refused", err, "unreachable")
		o.fs.Heal()
		o.obs.settled(t)
		if cur, err := o.fs.Sandbox(ctx, sb.ID); err != nil || cur.CurrentTurn != nil || cur.LastEventID != ready.LastEventID {
			t.Fatalf("after a refused turn the sandbox is %+v, %v; want it as before", cur, err)
		}
		turn := o.startTurn(sb.ID, "hello")
		o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		o.checkLog(sb.ID, r, turn.ID)
	})
	t.Run("QueuedTurn", func(t *testing.T) {
		open := make(chan struct{})
		o := newOutageEnv(t, func(c *coordinator.Config) {
			c.Builtins = map[string]coordinator.BuiltinAgent{"gated": gatedAgent(open)}
		})
		ctx := context.Background()
		sb := o.create(sandbox.CreateParams{Agent: "gated"})
		r := o.watch(sb.ID)
		o.fs.Fail(faultstore.ErrDiskFull)
		_, err := o.co.StartTurn(ctx, sb.ID, "hello")
		wantUnavailable(t, "a turn queued while the agent boots", err, "disk full")
		o.fs.Heal()
		o.obs.settled(t)
		if cur, err := o.fs.Sandbox(ctx, sb.ID); err != nil || cur.CurrentTurn != nil {
			t.Fatalf("after a refused queued turn the sandbox is %+v, %v; want no current turn", cur, err)
		}
		close(open)
		turn := o.startTurn(sb.ID, "hello")
		o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		o.checkLog(sb.ID, r, turn.ID)
	})
	t.Run("Create", func(t *testing.T) {
		o := newOutageEnv(t, nil)
		ctx := context.Background()
		o.fs.Fail(faultstore.ErrDiskFull)
		_, err := o.co.CreateSandbox(ctx, sandbox.CreateParams{})
		wantUnavailable(t, "a create", err, "disk full")
		if list, _, err := o.fs.Sandboxes(ctx, "", 10); err != nil || len(list) != 0 {
			t.Fatalf("a refused create left %d sandboxes, %v", len(list), err)
		}
		o.fs.Heal()
		o.obs.settled(t)
		sb := o.create(sandbox.CreateParams{})
		o.waitStatus(sb.ID, sandbox.StatusReady)
		o.checkLog(sb.ID, nil)
	})
}

// TestStoreOutageCancel: a cancel answered 202 takes effect even when the
// store refuses the turn's end: the turn ends canceled, once, when the
// store heals. A cancel of a queued turn whose own write is refused is
// answered unavailable and stands all the same: the turn ends canceled.
func TestStoreOutageCancel(t *testing.T) {
	ctx := context.Background()
	t.Run("Running", func(t *testing.T) {
		o := newOutageEnv(t, nil)
		sb := o.create(sandbox.CreateParams{})
		o.waitStatus(sb.ID, sandbox.StatusReady)
		r := o.watch(sb.ID)
		turn := o.startHanging(sb.ID)
		// The turn writes nothing while it hangs, so nothing has told the
		// coordinator yet: the cancel is taken, and its turn.completed is
		// the write the store refuses.
		o.fs.Fail(faultstore.ErrDiskFull)
		if _, err := o.co.CancelTurn(ctx, sb.ID, turn.ID); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		o.obs.unhealthy(t)
		_, err := o.co.StartTurn(ctx, sb.ID, "hello")
		wantUnavailable(t, "a turn on top of the canceled one", err, "disk full")
		o.fs.Heal()
		evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		if c := completed(evs); c.Status != sandbox.TurnCanceled {
			t.Fatalf("the canceled turn ended %+v, want canceled", c)
		}
		o.obs.settled(t)
		o.wantRetriedOnce(o.checkLog(sb.ID, r, turn.ID))
	})
	t.Run("Queued", func(t *testing.T) {
		open := make(chan struct{})
		defer close(open)
		o := newOutageEnv(t, func(c *coordinator.Config) {
			c.Builtins = map[string]coordinator.BuiltinAgent{"gated": gatedAgent(open)}
		})
		sb := o.create(sandbox.CreateParams{Agent: "gated"})
		r := o.watch(sb.ID)
		turn := o.startTurn(sb.ID, "hello")
		o.fs.Fail(faultstore.ErrDiskFull)
		_, err := o.co.CancelTurn(ctx, sb.ID, turn.ID)
		wantUnavailable(t, "a cancel of a queued turn whose write is refused", err, "disk full")
		o.fs.Heal()
		evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		if c := completed(evs); c.Status != sandbox.TurnCanceled {
			t.Fatalf("the canceled turn ended %+v, want canceled", c)
		}
		o.obs.settled(t)
		o.wantRetriedOnce(o.checkLog(sb.ID, r, turn.ID))
	})
}

// TestStoreOutageApproval: a decision whose approval.resolved the store
// refuses is answered unavailable; the turn is stopped, and after the heal
// the log has the decision once and the turn's one turn.completed. Asking
// again then says the approval is resolved.
//
// The same for a cancel that resolves a pending approval: it is answered
// unavailable, it stands, and the turn ends canceled once.
func TestStoreOutageApproval(t *testing.T) {
	start := func(t *testing.T) (*outageEnv, sandbox.Sandbox, sandbox.Turn, *sandbox.ApprovalRequested, *logReader) {
		o := newOutageEnv(t, nil)
		sb := o.create(sandbox.CreateParams{})
		o.waitStatus(sb.ID, sandbox.StatusReady)
		r := o.watch(sb.ID)
		turn := o.startTurn(sb.ID, "write a.txt")
		appr := approvalOf(o.waitFor(sb.ID, 0, isType(sandbox.TypeApprovalRequested)))
		return o, sb, turn, appr, r
	}
	ctx := context.Background()
	t.Run("Decide", func(t *testing.T) {
		o, sb, turn, appr, r := start(t)
		o.fs.Fail(faultstore.ErrUnreachable)
		_, err := o.co.Decide(ctx, sb.ID, appr.ApprovalID, sandbox.Decision{Decision: "approve"})
		wantUnavailable(t, "a decision whose write is refused", err, "unreachable")
		o.fs.Heal()
		evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		wantStoreStopped(t, evs, turn.ID)
		o.obs.settled(t)
		_, err = o.co.Decide(ctx, sb.ID, appr.ApprovalID, sandbox.Decision{Decision: "approve"})
		if !sandbox.IsType(err, sandbox.EApprovalResolved) {
			t.Fatalf("deciding again after the heal: %v, want approval_resolved", err)
		}
		o.wantRetriedOnce(o.checkLog(sb.ID, r, turn.ID))
	})
	t.Run("Cancel", func(t *testing.T) {
		o, sb, turn, _, r := start(t)
		o.fs.Fail(faultstore.ErrUnreachable)
		_, err := o.co.CancelTurn(ctx, sb.ID, turn.ID)
		wantUnavailable(t, "a cancel whose write is refused", err, "unreachable")
		o.fs.Heal()
		evs := o.waitFor(sb.ID, 0, turnCompleted(turn.ID))
		if c := completed(evs); c.Status != sandbox.TurnCanceled {
			t.Fatalf("the canceled turn ended %+v, want canceled", c)
		}
		o.obs.settled(t)
		o.wantRetriedOnce(o.checkLog(sb.ID, r, turn.ID))
	})
}
