package sandbox

import (
	"context"
	"errors"
)

// Store is the durable side of a server: per-sandbox event logs, the
// snapshot state beside each log, and the resources addressable by id. The
// bbolt file (boltstore) is the default implementation; every method must be
// safe for concurrent use.
//
// Errors are *Error where they are part of the contract: not_found
// for an unknown sandbox, turn or approval; cursor_pruned and cursor_stale
// (with Marks) from Read.
type Store interface {
	// Create stores a new sandbox record, its empty log, and config: the
	// coordinator's private settings of the sandbox (env, secrets), opaque to
	// the store and never part of any answer.
	Create(ctx context.Context, sb Sandbox, config []byte) error
	// Config returns the private config given to Create.
	Config(ctx context.Context, id string) ([]byte, error)
	// Sandbox returns the sandbox resource with its watermarks.
	Sandbox(ctx context.Context, id string) (Sandbox, error)
	// Sandboxes lists sandboxes in id order (creation order), starting after
	// the given id ("" for the first page); more is true when a next page exists.
	Sandboxes(ctx context.Context, after string, limit int) (list []Sandbox, more bool, err error)
	// State returns the snapshot state; State.Sandbox.LastEventID is the
	// log position it is consistent with.
	State(ctx context.Context, id string) (State, error)
	// Turn and Approval return a resource by id.
	Turn(ctx context.Context, sandboxID, turnID string) (Turn, error)
	Approval(ctx context.Context, sandboxID, approvalID string) (Approval, error)

	// Append makes events durable in the log of sandbox id, in order, and
	// folds them into its state, in one transaction that may be shared with
	// other callers' appends (group commit). mutate, when not nil, runs first
	// inside the same transaction and may change the state (status, current
	// turn); an error from it aborts this caller's part alone. Append assigns
	// each event its id (ev.ID) and returns only once the commit is synced;
	// no reader sees the events before that.
	Append(ctx context.Context, id string, events []*Event, mutate func(*State) error) error

	// Read returns up to limit retained events with id > after, in order.
	// after = 0 reads from the start of what is retained and is never refused;
	// otherwise after < pruned_through is cursor_pruned and after > last id is
	// cursor_stale. Each call is one short read; callers page.
	Read(ctx context.Context, id string, after uint64, limit int) ([]Record, error)
	// Head returns the log's last id and the sandbox's status and detail,
	// cheaply (from memory where the store can), so a stream can tell after
	// a wake-up whether there is anything to read or a status frame to send.
	Head(id string) (Head, error)
	// Wait returns a channel that is closed by the next commit that changes
	// sandbox id (new events, a state change or a prune). Take it before
	// Read so nothing committed in between is missed.
	Wait(id string) <-chan struct{}

	// Drop removes a sandbox whole: record, state, log.
	Drop(ctx context.Context, id string) error
	Close() error
}

// ErrFenced is matched by the error of an Append that this node may no
// longer make on a store shared by a cluster: the sandbox's lease lapsed
// or moved to another node, which may already be writing its log. Nothing
// was written; the node stops acting for the sandbox.
var ErrFenced = errors.New("this node no longer holds the sandbox's lease")

// Head is the tip of one sandbox's log and its lifecycle status.
type Head struct {
	LastEventID   uint64
	PrunedThrough uint64
	Status        string
	Detail        string
}

// HeadOf is the head a sandbox resource shows.
func HeadOf(sb Sandbox) Head {
	return Head{
		LastEventID:   uint64(sb.LastEventID),
		PrunedThrough: uint64(sb.PrunedThrough),
		Status:        sb.Status,
		Detail:        sb.StatusDetail,
	}
}
