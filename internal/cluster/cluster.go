// Package cluster is the contract between coordinators that share one
// store: leases of sandboxes held by nodes, and the calls one node forwards
// to the node that holds a sandbox's lease. The coordinator uses it;
// natscluster implements it on NATS, beside the store it shares
// (natsstore), which refuses with sandbox.ErrFenced the appends of a node that
// lost a sandbox's lease.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Cluster lets several coordinators share one store. Any node answers reads
// from the store; a sandbox's agent runs on the one node that holds the
// sandbox's lease, and the calls that drive it (turns, cancels, decisions,
// deletes) are forwarded there. Its workspace is on that node's disk too:
// requests for its files are proxied to the node's HTTP API (NodeURL).
// natscluster implements it on NATS.
//
// Leases belong to the node: they hold while the node renews them (Renew,
// at least every TTL/3) and lapse together when it stops, so a node that
// died, hung or lost its connection gives up every sandbox at once and
// another node can take them over.
type Cluster interface {
	// Node is this node's name, unique among the live nodes.
	Node() string
	// TTL is how long a lease outlives its node's last renewal.
	TTL() time.Duration
	// Renew extends this node's leases. until is the local time they
	// surely hold until (also on a transient error, the last such time).
	// After they lapsed it returns ErrLeaseLost, once: the node must stop
	// acting for every sandbox it held, without writing, because another
	// node may take them over. The next call starts a new set of leases.
	Renew(ctx context.Context) (until time.Time, err error)
	// Claim takes the lease of a sandbox for this node when it is free or
	// its holder's leases have lapsed, and returns the holder after the
	// attempt. Taken reports that this call took it, so the caller settles
	// what a previous holder left open.
	Claim(ctx context.Context, sandboxID string) (Claim, error)
	// Release gives up this node's lease of a sandbox, if it holds it.
	Release(ctx context.Context, sandboxID string) error
	// Forward asks node to run call and returns its reply. A node that does
	// not listen at all fails with an error wrapping ErrUnreachable, which
	// means the call was not run.
	Forward(ctx context.Context, node string, call Call) (Reply, error)
	// Serve answers the calls forwarded to this node with handle, each on
	// its own goroutine, until stop, which waits for those in progress.
	Serve(handle func(ctx context.Context, call Call) Reply) (stop func(), err error)
	// NodeURL is the base URL (scheme://host:port) at which live node
	// serves its HTTP API: byte streams of a sandbox's workspace, which
	// do not fit a forwarded call, are proxied there. It fails when the
	// node is not live or advertises no URL.
	NodeURL(ctx context.Context, node string) (string, error)
}

// Claim is the outcome of Cluster.Claim.
type Claim struct {
	Owner string // the node that holds the lease after the attempt
	Taken bool   // this call took the lease (it was free or had lapsed)
}

var (
	// ErrLeaseLost is returned by Cluster.Renew once this node's leases lapsed.
	ErrLeaseLost = errors.New("this node's leases lapsed before they could be renewed")
	// ErrUnreachable is wrapped by Cluster.Forward when no node listens.
	ErrUnreachable = errors.New("the node does not answer")
)

// Operations a node forwards to the holder of a sandbox's lease.
const (
	OpStartTurn  = "start_turn"
	OpCancelTurn = "cancel_turn"
	OpDecide     = "decide"
	OpDelete     = "delete"
	OpRevert     = "revert"
	OpConfig     = "config"
)

// Call is one operation on a sandbox's runtime, as one node forwards it to
// another.
type Call struct {
	// ID names the call across retries: a node that is asked again with
	// the same ID (its first answer was lost or late) answers once and
	// gives every attempt that answer, so a retry never runs it twice.
	ID         string            `json:"id,omitempty"`
	Op         string            `json:"op"`
	SandboxID  string            `json:"sandbox_id"`
	TurnID     string            `json:"turn_id,omitempty"`
	ApprovalID string            `json:"approval_id,omitempty"`
	Input      string            `json:"input,omitempty"`
	Decision   *sandbox.Decision `json:"decision,omitempty"`
	// Blocks is a turn's input sent as blocks rather than text.
	Blocks []sandbox.InputBlock `json:"blocks,omitempty"`
	// From is the node that forwarded the call. A forwarded call is never
	// forwarded again: a lease that moved meanwhile costs the sender a
	// retry, never a loop between nodes.
	From string `json:"from,omitempty"`
	// Queue lets a start_turn wait behind the open turn instead of
	// being refused.
	Queue bool `json:"queue,omitempty"`
	// Config is the mode and the model a config call asks for.
	Config *sandbox.ConfigChange `json:"config,omitempty"`
}

// Reply is a node's answer to a Call: the resource as JSON, or the error.
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ReplyError     `json:"error,omitempty"`
	// Moved says the node asked does not hold the sandbox's lease (any
	// more); the sender looks up the holder again.
	Moved bool `json:"moved,omitempty"`
}

// ReplyError is an error of a forwarded call. Type is the public type of
// docs/errors.md, answered to the client as the holder would have; it is empty for
// an internal failure, whose detail in Message is for the sender's log.
type ReplyError struct {
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
}
