package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The unsettled bucket holds the id of every sandbox whose meta is not
// sandbox.Settled, so that a start reads those sandboxes and no other (see
// doc.go, Layout). It changes in the transaction that writes the meta.

// markUnsettled puts id in the unsettled bucket u, or takes it out, as sb
// says; it writes only when that changes, so a write of a meta that keeps
// its membership dirties no page of the bucket.
func markUnsettled(u *bbolt.Bucket, id string, sb sandbox.Sandbox) error {
	return setUnsettled(u, id, !sandbox.Settled(sb))
}

func setUnsettled(u *bbolt.Bucket, id string, want bool) error {
	key := []byte(id)
	// A cursor, not Get: whether Get returns nil or an empty slice for an
	// empty value depends on where bbolt found it.
	k, _ := u.Cursor().Seek(key)
	if has := bytes.Equal(k, key); has == want {
		return nil
	} else if has {
		return u.Delete(key)
	}
	return u.Put(key, []byte{})
}

// buildUnsettled fills the unsettled bucket u from every sandbox's meta:
// once, at the open of a file an earlier version wrote without it. It
// returns how many sandboxes it read.
func buildUnsettled(tx *bbolt.Tx, u *bbolt.Bucket) (int, error) {
	root := tx.Bucket(bucketSandboxes)
	n := 0
	err := root.ForEachBucket(func(k []byte) error {
		n++
		sb, err := readMeta(root.Bucket(k), string(k))
		if err != nil {
			return err
		}
		return markUnsettled(u, string(k), sb)
	})
	return n, err
}

// Unsettled returns the ids of the sandboxes that are not sandbox.Settled,
// in id order, from the unsettled bucket and, for the sandboxes in memory,
// their published resource: a sandbox's meta in the file lags what its WAL
// tail holds, and every sandbox whose published resource differs from its
// meta is in memory. The coordinator's recovery reads these and no other.
func (s *Store) Unsettled(ctx context.Context) ([]string, error) {
	set := make(map[string]bool)
	err := s.view(func(tx *bbolt.Tx) error {
		u := tx.Bucket(bucketUnsettled)
		if u == nil {
			return fmt.Errorf("the unsettled bucket is missing")
		}
		return u.ForEach(func(k, _ []byte) error {
			set[string(k)] = true
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	for id, e := range s.sandboxes {
		if e.sb.ID != "" { // an entry is published with its resource
			set[id] = !sandbox.Settled(e.sb)
		}
	}
	s.mu.RUnlock()
	ids := make([]string, 0, len(set))
	for id, open := range set {
		if open {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// checkUnsettled checks the unsettled bucket against the metas: open has
// every sandbox whose meta decoded, true where it is not settled. The
// bucket follows the metas, not the WAL, so a file a crash left agrees
// too. A file without the bucket was written before it existed; the next
// open builds it.
func checkUnsettled(tx *bbolt.Tx, open map[string]bool) []error {
	u := tx.Bucket(bucketUnsettled)
	if u == nil {
		return nil
	}
	var errs []error
	listed := make(map[string]bool)
	err := u.ForEach(func(k, _ []byte) error {
		id := string(k)
		listed[id] = true
		switch unsettled, ok := open[id]; {
		case !ok && tx.Bucket(bucketSandboxes).Bucket(k) == nil:
			errs = append(errs, fmt.Errorf("unsettled: sandbox %s is listed but does not exist", id))
		case ok && !unsettled:
			errs = append(errs, fmt.Errorf("unsettled: sandbox %s is listed but its meta is settled", id))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	for id, unsettled := range open {
		if unsettled && !listed[id] {
			errs = append(errs, fmt.Errorf("unsettled: sandbox %s is not listed but its meta is not settled", id))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}
