package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// ready is what /readyz asks: the store answers and takes writes,
// retention runs, and with a NATS store the connection, the stream and the
// bucket are up and this node's leases hold.
func (m *Main) ready() error {
	if !m.probeDone.Load() {
		return errors.New("checking that agents can be confined: no agent starts until the check passed")
	}
	if _, _, err := m.Store.Sandboxes(context.Background(), "", 1); err != nil {
		return fmt.Errorf("the database does not answer (%w); see the server log", err)
	}
	if m.writable != nil {
		if err := m.writable(); err != nil {
			return errors.New("the database file was deleted or replaced under the running server: it takes no writes; see the server log")
		}
	}
	// A store that answers reads may still refuse writes (a full disk):
	// such a server can show logs but run no turn.
	if err := m.Coordinator.Writable(); err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return errors.New(se.Message)
		}
		return err
	}
	if h, ok := m.Store.(interface{ Health(context.Context) error }); ok {
		if err := h.Health(context.Background()); err != nil {
			return fmt.Errorf("the NATS store cannot write: %w", err)
		}
	}
	if m.Retainer != nil && !m.Retainer.Alive() {
		return errors.New("the retention loop is not running or makes no progress; see the server log for its last error")
	}
	if m.Cluster != nil {
		return m.Cluster.Ready()
	}
	return nil
}
