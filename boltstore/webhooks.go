package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The webhooks bucket (see doc.go, Layout): one nested bucket per
// endpoint, its record opaque to the store, and its cursors.
var (
	bucketWebhooks  = []byte("webhooks")
	keyWebhook      = []byte("endpoint")
	bucketWHCursors = []byte("cursors")
)

func webhookNotFound(id string) error {
	return sandbox.Errorf(sandbox.ENotFound, "webhook %s not found", id)
}

// PutWebhook stores the record of endpoint id (its JSON, secret included,
// opaque to the store), creating the endpoint or replacing its record;
// its cursors are kept.
func (s *Store) PutWebhook(ctx context.Context, id string, endpoint []byte) error {
	if id == "" {
		return webhookNotFound(id)
	}
	if len(endpoint) == 0 {
		return sandbox.Errorf(sandbox.EInvalidRequest, "webhook %s: an empty record", id)
	}
	return s.submit(ctx, &webhookWrite{id: id, put: bytes.Clone(endpoint)})
}

// DeleteWebhook removes endpoint id and its cursors.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	if id == "" {
		return webhookNotFound(id)
	}
	return s.submit(ctx, &webhookWrite{id: id, del: true})
}

// SetWebhookCursor records that endpoint id is done with the log of
// sandboxID through event after; a cursor already further stays. An
// endpoint deleted since is not_found, so a delivery racing a delete does
// not bring the endpoint back.
func (s *Store) SetWebhookCursor(ctx context.Context, id, sandboxID string, after uint64) error {
	if id == "" || sandboxID == "" {
		return webhookNotFound(id)
	}
	return s.submit(ctx, &webhookWrite{id: id, sandbox: sandboxID, cursor: after})
}

// Webhook returns the record of endpoint id.
func (s *Store) Webhook(ctx context.Context, id string) ([]byte, error) {
	var v []byte
	err := s.view(func(tx *bbolt.Tx) error {
		b := webhookBucket(tx, id)
		if b == nil {
			return webhookNotFound(id)
		}
		v = b.Get(keyWebhook)
		if err := s.checkValue(tx, v, "webhook endpoint "+id); err != nil {
			return err
		}
		v = bytes.Clone(v)
		return nil
	})
	return v, err
}

// Webhooks returns the records of every endpoint, in id order.
func (s *Store) Webhooks(ctx context.Context) ([][]byte, error) {
	var list [][]byte
	err := s.view(func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketWebhooks)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(k []byte) error {
			v := root.Bucket(k).Get(keyWebhook)
			if err := s.checkValue(tx, v, "a webhook endpoint"); err != nil {
				return err
			}
			list = append(list, bytes.Clone(v))
			return nil
		})
	})
	return list, err
}

// WebhookCursors returns the cursors of endpoint id by sandbox id.
func (s *Store) WebhookCursors(ctx context.Context, id string) (map[string]uint64, error) {
	cursors := make(map[string]uint64)
	err := s.view(func(tx *bbolt.Tx) error {
		b := webhookBucket(tx, id)
		if b == nil {
			return webhookNotFound(id)
		}
		c := b.Bucket(bucketWHCursors)
		if c == nil {
			return nil
		}
		return c.ForEach(func(k, v []byte) error {
			if len(v) == 8 {
				cursors[string(k)] = binary.BigEndian.Uint64(v)
			}
			return nil
		})
	})
	return cursors, err
}

func webhookBucket(tx *bbolt.Tx, id string) *bbolt.Bucket {
	root := tx.Bucket(bucketWebhooks)
	if root == nil || id == "" {
		return nil
	}
	return root.Bucket([]byte(id))
}

// webhookWrite is one change of the webhooks bucket. It goes through the
// committer like any write, so a cursor's advance shares the commit of
// the appends queued beside it instead of costing a commit of its own.
type webhookWrite struct {
	id      string
	put     []byte // the record to store, or
	del     bool   // the endpoint to remove, or
	sandbox string // the sandbox whose cursor is set to cursor
	cursor  uint64
}

func (w *webhookWrite) apply(t *txn) (reqErr, txErr error) {
	tx := t.wal.Tx()
	switch {
	case w.put != nil:
		root, err := tx.CreateBucketIfNotExists(bucketWebhooks)
		if err != nil {
			return nil, err
		}
		b, err := root.CreateBucketIfNotExists([]byte(w.id))
		if err != nil {
			return nil, err
		}
		if err := b.Put(keyWebhook, w.put); err != nil {
			return nil, err
		}
	case w.del:
		root := tx.Bucket(bucketWebhooks)
		if root == nil || root.Bucket([]byte(w.id)) == nil {
			return webhookNotFound(w.id), nil
		}
		if err := root.DeleteBucket([]byte(w.id)); err != nil {
			return nil, err
		}
	default:
		b := webhookBucket(tx, w.id)
		if b == nil {
			return webhookNotFound(w.id), nil
		}
		c, err := b.CreateBucketIfNotExists(bucketWHCursors)
		if err != nil {
			return nil, err
		}
		// A cursor never moves back: a late write (from a delivery that
		// lost its sandbox, or two crossing) leaves the larger value.
		if v := c.Get([]byte(w.sandbox)); len(v) == 8 && binary.BigEndian.Uint64(v) >= w.cursor {
			return nil, nil
		}
		if err := c.Put([]byte(w.sandbox), binary.BigEndian.AppendUint64(nil, w.cursor)); err != nil {
			return nil, err
		}
	}
	t.dirty = true
	return nil, nil
}
