package coordinator

import (
	"context"
	"time"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// approvals are the permission requests of the running turn that wait for
// a person, by approval id, and the timer that expires the earliest. Each
// is answered to the agent exactly once: decided, expired, canceled with
// its turn, or cancelled by the agent's stop (agent.Conn.Close).
type approvals struct {
	runs  map[string]*approvalRun
	timer *time.Timer
}

type approvalRun struct {
	req     agent.RequestID
	data    sandbox.ApprovalRequested
	pending translate.Pending
}

// cancelledOutcome answers a permission request whose turn ended (ACP's
// "cancelled" outcome).
var cancelledOutcome = agent.PermissionCancelled()

// add keeps a request the translator published as approval.requested.
func (a *approvals) add(req agent.RequestID, p translate.Pending, evs []*sandbox.Event) {
	run := &approvalRun{req: req, pending: p}
	for _, ev := range evs {
		if d, ok := ev.Data.(*sandbox.ApprovalRequested); ok {
			run.data = *d
		}
	}
	a.runs[p.ApprovalID] = run
}

// cancelAll answers every pending request cancelled, through respond, and
// forgets them: their turn ended, and its end resolves them in the log.
func (a *approvals) cancelAll(respond func(agent.RequestID, any)) {
	for id, r := range a.runs {
		respond(r.req, cancelledOutcome)
		delete(a.runs, id)
	}
	a.timer.Stop()
}

// forget drops the requests without an answer: the agent they would go to
// is stopped, and its stop answers them.
func (a *approvals) forget() {
	clear(a.runs)
	a.timer.Stop()
}

func (b *box) decide(approvalID string, d sandbox.Decision) (sandbox.Approval, error) {
	a, ok := b.approvals.runs[approvalID]
	if !ok {
		appr, err := b.c.store.Approval(context.Background(), b.id, approvalID)
		if err != nil {
			return sandbox.Approval{}, err
		}
		if appr.Status == sandbox.ApprovalDone {
			dec := ""
			if appr.Decision != nil {
				dec = *appr.Decision
			}
			return sandbox.Approval{}, sandbox.Errorf(sandbox.EApprovalResolved, "approval %s was already resolved (%s)", approvalID, dec)
		}
		return sandbox.Approval{}, sandbox.Errorf(sandbox.EConflict, "approval %s is not pending on this server", approvalID)
	}
	var decision string
	switch {
	case d.OptionID != "" && d.Decision != "":
		return sandbox.Approval{}, sandbox.Errorf(sandbox.EInvalidRequest, "give either decision or option_id, not both")
	case d.OptionID != "":
		for _, o := range a.data.Options {
			if o.OptionID == d.OptionID {
				decision = sandbox.DecisionDenied
				if o.Kind == sandbox.OptionAllowOnce || o.Kind == sandbox.OptionAllowAlways {
					decision = sandbox.DecisionApproved
				}
			}
		}
		if decision == "" {
			ids := make([]string, 0, len(a.data.Options))
			for _, o := range a.data.Options {
				ids = append(ids, o.OptionID)
			}
			return sandbox.Approval{}, sandbox.Errorf(sandbox.EInvalidRequest, "unknown option_id %q; this approval offers %v", d.OptionID, ids)
		}
	case d.Decision == "approve":
		decision = sandbox.DecisionApproved
	case d.Decision == "deny":
		decision = sandbox.DecisionDenied
	default:
		return sandbox.Approval{}, sandbox.Errorf(sandbox.EInvalidRequest, `decision must be "approve" or "deny" (or give option_id)`)
	}
	out, evs, err := b.tr.ResolveApproval(approvalID, decision, d.OptionID, sandbox.ReasonUser)
	if err != nil {
		return sandbox.Approval{}, err
	}
	delete(b.approvals.runs, approvalID)
	if err := b.emit(evs); err != nil {
		// The agent is not told: the refusal stops the turn, and the stop
		// answers its request cancelled. The log keeps the decision,
		// which lands with the turn's end when the store is back.
		return sandbox.Approval{}, err
	}
	b.respond(a.req, agentOutcome(out))
	b.approvals.arm()
	return b.c.store.Approval(context.Background(), b.id, approvalID)
}

func agentOutcome(out translate.AgentOutcome) any {
	if out.Cancelled || out.OptionID == "" {
		return cancelledOutcome
	}
	return agent.PermissionSelected(out.OptionID)
}

// arm sets the timer to the earliest expiry of a pending approval.
func (a *approvals) arm() {
	a.timer.Stop()
	var next time.Time
	for _, r := range a.runs {
		if next.IsZero() || r.pending.ExpiresAt.Before(next) {
			next = r.pending.ExpiresAt
		}
	}
	if !next.IsZero() {
		a.timer.Reset(max(time.Until(next), 0))
	}
}

func (b *box) expireApprovals() {
	now := b.c.cfg.Now()
	var evs []*sandbox.Event
	for id, a := range b.approvals.runs {
		if now.Before(a.pending.ExpiresAt) {
			continue
		}
		out, e, err := b.tr.ResolveApproval(id, sandbox.DecisionCanceled, "", sandbox.ReasonTimeout)
		if err != nil {
			continue
		}
		b.respond(a.req, agentOutcome(out))
		evs = append(evs, e...)
		delete(b.approvals.runs, id)
	}
	b.emit(evs)
	b.approvals.arm()
}
