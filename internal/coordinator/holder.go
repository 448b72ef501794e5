package coordinator

import (
	"context"
	"errors"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// A sandbox's workspace is a directory on the disk of the node that runs
// its agent. The calls that drive the agent travel as forwarded calls
// (cluster.go), but a file, an upload or an archive is a byte stream that
// fits no NATS message, so the HTTP layer proxies those requests to the
// holder's own API instead; Holder tells it where that is.

// Holder says where sandbox id's workspace is: here (this node answers
// the request itself) or on another node, whose API URL it returns. A
// sandbox that no live node holds is taken over by this node first, as a
// turn would take it, so the answer is here. On a cluster, a sandbox that
// does not exist answers not_found, and a holder whose API URL is not
// known, unavailable.
func (c *Coordinator) Holder(ctx context.Context, id string) (url string, here bool, err error) {
	return c.place.holder(ctx, id)
}

// holder is here: the only coordinator of its store has every workspace
// (the handler answers not_found for a sandbox that does not exist).
func (local) holder(context.Context, string) (string, bool, error) {
	return "", true, nil
}

// holder claims the sandbox's lease (without booting its agent) and
// answers here when this node holds it, else the holder's API URL. It
// looks the sandbox up first: a lease is never taken for a sandbox that
// does not exist. A deleted sandbox has nothing left to hold, so any node
// answers for it, as for the calls of run.
func (l *leased) holder(ctx context.Context, id string) (string, bool, error) {
	sb, err := l.c.store.Sandbox(ctx, id)
	if err != nil {
		return "", false, err
	}
	if sb.Status == sandbox.StatusDeleted {
		return "", true, nil
	}
	_, owner, err := l.claim(ctx, sb.ID, false)
	if err != nil {
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		var se *sandbox.Error
		if errors.As(err, &se) {
			return "", false, se
		}
		l.c.log.Warn("cluster: find the holder of a sandbox", "sandbox_id", sb.ID, "err", err)
		return "", false, sandbox.Errorf(sandbox.EUnavailable,
			"this node cannot find which node runs sandbox %s now; try again shortly", sb.ID)
	}
	if owner == l.node {
		return "", true, nil
	}
	u, err := l.cl.NodeURL(ctx, owner)
	if err != nil {
		l.c.log.Warn("cluster: the holder of a sandbox has no API URL to reach", "sandbox_id", sb.ID, "node", owner, "err", err)
		return "", false, sandbox.Errorf(sandbox.EUnavailable,
			"the node running sandbox %s (%s) cannot be reached over HTTP; try again shortly (its log and --advertise-url say more)", sb.ID, owner)
	}
	return u, false, nil
}
