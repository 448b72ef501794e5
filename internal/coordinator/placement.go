package coordinator

import (
	"context"
	"errors"
	"slices"

	"github.com/sparkles-dev/sparkles/internal/cluster"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// What runs the sandboxes, and where, is chosen once, in New, as two
// values that the operations call straight through:
//
//   - runtimes says whether a sandbox has a runtime at all. agentRuntimes
//     boot one agent per sandbox and run its turns, approvals and deletes
//     there. noRuntimes is a coordinator with no agents configured: a
//     sandbox is its event log alone, ready at once, written only through
//     AppendEvents; turns, cancels and decisions are refused with a
//     conflict ("this server runs no agents"), and a delete only marks the
//     sandbox deleted.
//   - placement says on which node a sandbox's runtime is. local is the
//     only coordinator of its store: every runtime is here. leased is a
//     node of a cluster (cluster.go, cluster_leases.go): a runtime is on
//     the node that holds the sandbox's lease, calls are forwarded there,
//     leases are renewed and swept, and what a node that went away left
//     open is settled by whoever takes its sandboxes over.
//
// Without runtimes there is nothing to place, so a coordinator without
// agents is local even with a Config.Cluster: no node owns anything.

// runtimes is whether sandboxes have agent runtimes: agentRuntimes or
// noRuntimes.
type runtimes interface {
	// agent checks the agent a create asks for ("" for the default) and
	// returns the new sandbox's agent and first status.
	agent(name string) (agent, status string, err error)
	// start starts the runtime of sandbox id, just stored after
	// placement.claimNew returned epoch.
	start(ctx context.Context, id string, epoch uint64) error
	// call runs an operation on the runtime of sb.
	call(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error)
	// delete marks sandbox id deleted, stopping whatever runs for it.
	delete(ctx context.Context, id string) (sandbox.Sandbox, error)
}

// placement is where the sandboxes' runtimes are: local or leased.
type placement interface {
	// claimNew places sandbox id, about to be created, on this node
	// before the store has it. It returns the epoch that held checks the
	// new sandbox's box against.
	claimNew(ctx context.Context, id string) (epoch uint64, err error)
	// held reports whether b, made after a claim in epoch, still stands; a
	// box that does not is retired.
	held(b *box, epoch uint64) bool
	// release lets go of sandbox id on this node: its create failed, or
	// it is deleted and nothing runs for it any more.
	release(ctx context.Context, id string) error
	// run runs call on the runtime of sb, here or on the node that has it.
	run(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error)
	// holder says where sb's workspace is (see Coordinator.Holder).
	holder(ctx context.Context, id string) (url string, here bool, err error)
	// recover settles, before serving, what runtimes that are gone left
	// open (see Coordinator.Recover).
	recover(ctx context.Context) error
	// queued returns turn turnID of sandbox id when it is queued on
	// another node, where this node's store has no record of it yet.
	queued(ctx context.Context, id, turnID string) (sandbox.Turn, bool)
	// probeAny names a sandbox a store probe may write when this node
	// runs none, or "" (see Coordinator.probeTarget).
	probeAny(ctx context.Context) string
	// stop stops taking calls from other nodes; Close calls it before it
	// stops the runtimes.
	stop()
}

// hasAgents reports whether cfg gives sandboxes an agent runtime at all.
func hasAgents(cfg Config) bool { return len(cfg.Agents)+len(cfg.Builtins) > 0 }

// agentRuntimes boot an agent for every sandbox, placed by c.place.
type agentRuntimes struct{ c *Coordinator }

func (r agentRuntimes) agent(name string) (string, string, error) {
	if name == "" {
		name = r.c.cfg.DefaultAgent
	}
	if names := agentNames(r.c.cfg); !slices.Contains(names, name) {
		return "", "", sandbox.Errorf(sandbox.EInvalidRequest, "unknown agent %q; this server has: %v", name, names)
	}
	return name, sandbox.StatusCreating, nil
}

func (r agentRuntimes) start(ctx context.Context, id string, epoch uint64) error {
	b, err := r.c.box(id)
	if err != nil {
		return err
	}
	if !r.c.place.held(b, epoch) {
		// The node's leases lapsed meanwhile: whoever takes the new
		// sandbox over settles it, and its next turn boots the agent.
		return nil
	}
	return b.do(ctx, func() { b.boot(false) })
}

func (r agentRuntimes) call(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	return r.c.place.run(ctx, sb, call)
}

func (r agentRuntimes) delete(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return callAs[sandbox.Sandbox](ctx, r.c, cluster.Call{Op: cluster.OpDelete, SandboxID: id})
}

// noRuntimes is a coordinator without agents: the event log alone.
type noRuntimes struct{ c *Coordinator }

func (noRuntimes) agent(name string) (string, string, error) {
	if name != "" {
		return "", "", sandbox.Errorf(sandbox.EInvalidRequest, "unknown agent %q; this server runs no agents", name)
	}
	return "", sandbox.StatusReady, nil
}

func (noRuntimes) start(context.Context, string, uint64) error { return nil }

func (noRuntimes) call(context.Context, sandbox.Sandbox, cluster.Call) (any, error) {
	return nil, sandbox.Errorf(sandbox.EConflict, "this server runs no agents")
}

// delete marks the sandbox deleted in its state: nothing runs for it.
func (r noRuntimes) delete(ctx context.Context, id string) (sandbox.Sandbox, error) {
	c := r.c
	if err := c.Writable(); err != nil {
		return sandbox.Sandbox{}, err
	}
	err := c.store.Append(ctx, id, nil, func(st *sandbox.State) error {
		st.Sandbox.Status, st.Sandbox.StatusDetail = sandbox.StatusDeleted, "deleted by request"
		st.Sandbox.UpdatedAt = c.now()
		return nil
	})
	c.noteWrite(id, err)
	if storeFault(err) {
		return sandbox.Sandbox{}, unavailable(err)
	}
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.store.Sandbox(ctx, id)
}

// local is the placement of the only coordinator of its store: every
// sandbox's runtime is here, and nothing needs claiming.
type local struct{ c *Coordinator }

func (local) claimNew(context.Context, string) (uint64, error) { return 0, nil }

func (local) held(*box, uint64) bool { return true }

func (local) release(context.Context, string) error { return nil }

func (p local) run(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	return p.c.runHere(ctx, sb, call)
}

// recover settles every sandbox: whatever was open, the previous run of
// this server left it.
func (p local) recover(ctx context.Context) error { return p.c.recoverAll(ctx) }

func (local) queued(context.Context, string, string) (sandbox.Turn, bool) {
	return sandbox.Turn{}, false
}

// probeAny is any sandbox: alone on the store, this node writes them all.
func (p local) probeAny(ctx context.Context) string {
	list, _, err := p.c.store.Sandboxes(ctx, "", 1)
	if err != nil || len(list) == 0 {
		return ""
	}
	return list[0].ID
}

func (local) stop() {}

// runHere runs call on this node's runtime of sb.
func (c *Coordinator) runHere(ctx context.Context, sb sandbox.Sandbox, call cluster.Call) (any, error) {
	for {
		b, err := c.box(sb.ID)
		if err != nil {
			return nil, err
		}
		v, err := c.exec(ctx, b, sb, call)
		if !errors.Is(err, errMoved) {
			return v, err
		}
		// The box was retired as the leases lapsed; a new one answers.
	}
}
