package natscluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// maxConflicts bounds how often a lease write starts again after another
// node changed the key under it.
const maxConflicts = 16

// opCtx bounds a request to the server when the caller's context does not.
func opCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// isConflict reports whether a KV write lost a revision check: another
// writer changed the key since it was read.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// validID reports whether id can be one token of a key, as the store's
// sandbox ids are.
func validID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !validTokenByte(id[i]) {
			return false
		}
	}
	return true
}

func notFound(id string) error {
	return sandbox.Errorf(sandbox.ENotFound, "sandbox %s not found", id)
}

// noTTL refuses a bucket whose keys expire: leases must stay until their
// node lets go of them or another takes them over.
func noTTL(st jetstream.KeyValueStatus) error {
	if st.TTL() != 0 {
		return fmt.Errorf("its keys expire after %s", st.TTL())
	}
	return nil
}

// needTTL refuses a bucket whose keys never expire: a node's registration
// must lapse when the node stops renewing it.
func needTTL(st jetstream.KeyValueStatus) error {
	if st.TTL() <= 0 {
		return errors.New("its keys never expire, so a dead node's leases would never lapse")
	}
	return nil
}
