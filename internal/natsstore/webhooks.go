package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// The webhook deliveries keep their endpoints and cursors in a bucket of
// their own (see doc.go, Layout), so every coordinator on the store shares
// them: ep.<id> is an endpoint's record, opaque to the store (it holds the
// signing secret), and cur.<id>.<sandbox id> how far the endpoint is
// through that sandbox's log, in decimal. Cursors are keys of their own
// rather than part of the record because each delivery moves one: many
// sandboxes' deliveries to one endpoint, from several nodes, would
// otherwise contend on one key and rewrite all of its cursors each time.

// maxWebhookID bounds the ids the bucket takes, as validID bounds a
// sandbox's: a key is a subject, and a subject has a bounded length.
const maxWebhookID = 200

func webhookEndpointKey(id string) string { return "ep." + keyToken(id) }
func webhookCursorKey(id, sandboxID string) string {
	return "cur." + keyToken(id) + "." + keyToken(sandboxID)
}

// keyToken makes s one token of a key. The ids of this project are
// letters, digits, _ and - and pass as they are; any other byte (a dot
// would split the token, a wildcard match others) is written =XX in hex,
// and = itself is never one of them, so two ids never share a token.
func keyToken(s string) string {
	if validID(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02x", c)
	}
	return b.String()
}

// fromKeyToken undoes keyToken.
func fromKeyToken(t string) (string, bool) {
	if !strings.Contains(t, "=") {
		return t, true
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '=' {
			b.WriteByte(t[i])
			continue
		}
		if i+2 >= len(t) {
			return "", false
		}
		c, err := strconv.ParseUint(t[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String(), true
}

func webhookNotFound(id string) error {
	return sandbox.Errorf(sandbox.ENotFound, "webhook %s not found", id)
}

// knownWebhookID reports whether id can name an endpoint: one that cannot
// was never stored, so it is not_found.
func knownWebhookID(id string) bool { return id != "" && len(id) <= maxWebhookID }

// openWebhooks opens the webhooks bucket, creating it beside the store's
// own bucket with the same settings.
func (s *Store) openWebhooks(ctx context.Context, until time.Time, opts Options) error {
	return s.whenReady(ctx, until, func(ctx context.Context) (err error) {
		s.webhooks, err = s.openBucket(ctx, jetstream.KeyValueConfig{
			Bucket:      opts.WebhookBucket,
			Description: "Sparkles webhook endpoints and their cursors per sandbox",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
		}, noTTL)
		return err
	})
}

// PutWebhook stores the record of endpoint id (its JSON, secret included,
// opaque to the store), creating the endpoint or replacing its record;
// its cursors are kept.
func (s *Store) PutWebhook(ctx context.Context, id string, endpoint []byte) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if id == "" {
		return webhookNotFound(id)
	}
	if len(id) > maxWebhookID {
		return sandbox.Errorf(sandbox.EInvalidRequest, "webhook id is longer than %d bytes", maxWebhookID)
	}
	ctx, done, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer func() { err = done(err) }()
	if _, err := s.webhooks.Put(ctx, webhookEndpointKey(id), endpoint); err != nil {
		return fmt.Errorf("put webhook %s: %w", id, err)
	}
	return nil
}

// Webhook returns the record of endpoint id.
func (s *Store) Webhook(ctx context.Context, id string) ([]byte, error) {
	var rec []byte
	err := s.readWebhook(ctx, id, func(_ context.Context, kve jetstream.KeyValueEntry) error {
		rec = kve.Value()
		return nil
	})
	return rec, err
}

// readWebhook runs read on the record of endpoint id within one call of
// the store (see begin), so that what read asks is bounded and given up
// as the record's read is. An endpoint that is not there is not_found.
func (s *Store) readWebhook(ctx context.Context, id string, read func(context.Context, jetstream.KeyValueEntry) error) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if !knownWebhookID(id) {
		return webhookNotFound(id)
	}
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kve, err := s.webhooks.Get(ctx, webhookEndpointKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return webhookNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("webhook %s: %w", id, err)
	}
	return read(ctx, kve)
}

// Webhooks returns the records of every endpoint, in id order.
func (s *Store) Webhooks(ctx context.Context) (_ [][]byte, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	ctx, done := s.begin(ctx, false)
	defer func() { err = done(err) }()
	type rec struct {
		id  string
		val []byte
	}
	var recs []rec
	err = s.watchAll(ctx, "ep.*", func(kve jetstream.KeyValueEntry) {
		if id, ok := fromKeyToken(strings.TrimPrefix(kve.Key(), "ep.")); ok {
			recs = append(recs, rec{id, kve.Value()})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	slices.SortFunc(recs, func(a, b rec) int { return strings.Compare(a.id, b.id) })
	list := make([][]byte, len(recs))
	for i, r := range recs {
		list[i] = r.val
	}
	return list, nil
}

// WebhookCursors returns the cursors of endpoint id by sandbox id.
func (s *Store) WebhookCursors(ctx context.Context, id string) (map[string]uint64, error) {
	var cursors map[string]uint64
	err := s.readWebhook(ctx, id, func(ctx context.Context, _ jetstream.KeyValueEntry) error {
		prefix := "cur." + keyToken(id) + "."
		found := make(map[string]uint64)
		err := s.watchAll(ctx, prefix+"*", func(kve jetstream.KeyValueEntry) {
			sandboxID, ok := fromKeyToken(strings.TrimPrefix(kve.Key(), prefix))
			n, err := strconv.ParseUint(string(kve.Value()), 10, 64)
			if ok && err == nil {
				found[sandboxID] = n
			}
		})
		if err != nil {
			return fmt.Errorf("webhook %s: cursors: %w", id, err)
		}
		cursors = found
		return nil
	})
	return cursors, err
}

// DeleteWebhook removes endpoint id and its cursors. The record goes
// first: a cursor set meanwhile then finds it gone and removes itself
// (see SetWebhookCursor), and one set before is removed here. A delete
// cut short between the two leaves cursors of no endpoint, which no read
// returns; deleting the endpoint again removes them.
func (s *Store) DeleteWebhook(ctx context.Context, id string) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if !knownWebhookID(id) {
		return webhookNotFound(id)
	}
	ctx, done, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer func() { err = done(err) }()
	key := webhookEndpointKey(id)
	get := s.webhooks.Get
	var gone bool
	for !gone {
		kve, err := get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if err := s.purgeWebhookCursors(ctx, id); err != nil {
				return err
			}
			return webhookNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("delete webhook %s: %w", id, err)
		}
		// Expecting the revision read makes one of two deletes at once
		// the one that found the endpoint, as on bbolt.
		err = s.webhooks.Delete(ctx, key, jetstream.LastRevision(kve.Revision()))
		if err != nil && !casConflict(err) {
			return fmt.Errorf("delete webhook %s: %w", id, err)
		}
		gone = err == nil
		get = s.leaderGetWebhook // the replica that answered is behind
	}
	return s.purgeWebhookCursors(ctx, id)
}

// SetWebhookCursor records that endpoint id is done with the log of
// sandboxID through event after. A cursor never moves back: a write of a
// smaller value (a late one, from a node that has since lost the sandbox)
// leaves the larger, so the update expects the revision it read and is
// read again when another writer moved it first. An endpoint deleted is
// not_found, and a cursor written while it was being deleted is removed
// again, so a delivery racing a delete neither brings the endpoint back
// nor leaves its cursor behind: the record is read from the bucket's
// leader after the cursor is written, and a delete removes the record
// before it lists the cursors, so either this finds the record gone or
// the delete finds this cursor.
func (s *Store) SetWebhookCursor(ctx context.Context, id, sandboxID string, after uint64) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if !knownWebhookID(id) || sandboxID == "" || len(sandboxID) > maxWebhookID {
		return webhookNotFound(id)
	}
	ctx, done, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer func() { err = done(err) }()
	key := webhookCursorKey(id, sandboxID)
	val := []byte(strconv.FormatUint(after, 10))
	get := s.webhooks.Get
	for written := false; !written; {
		kve, err := get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = s.webhooks.Create(ctx, key, val)
		case err != nil:
			return fmt.Errorf("webhook %s: cursor of %s: %w", id, sandboxID, err)
		default:
			if cur, perr := strconv.ParseUint(string(kve.Value()), 10, 64); perr == nil && cur >= after {
				written = true // as far or further already
				continue
			}
			_, err = s.webhooks.Update(ctx, key, val, kve.Revision())
		}
		if err != nil && !casConflict(err) {
			return fmt.Errorf("webhook %s: cursor of %s: %w", id, sandboxID, err)
		}
		written = err == nil
		get = s.leaderGetWebhook // another writer moved it, or the replica is behind
	}
	s.hooks.Load().webhookCursorWritten(id)
	if _, err := s.leaderGetWebhook(ctx, webhookEndpointKey(id)); errors.Is(err, jetstream.ErrKeyNotFound) {
		if _, err := s.purge(ctx, "KV_"+s.webhooks.Bucket(), s.webhookSubject(key), 0); err != nil {
			return fmt.Errorf("webhook %s: remove the cursor of a deleted endpoint: %w", id, err)
		}
		return webhookNotFound(id)
	} else if err != nil {
		return fmt.Errorf("webhook %s: %w", id, err)
	}
	return nil
}

// beginWrite starts a call that writes to the webhooks bucket: refused at
// once while NATS is known unreachable, bounded by the request timeout,
// and given up a little after NATS is found unreachable (see reach.go).
// done turns the error of such a give-up into unavailable.
func (s *Store) beginWrite(ctx context.Context) (context.Context, func(error) error, error) {
	if err := s.refuse(true); err != nil {
		return nil, nil, err
	}
	// The call's own context is cut off at once; its requests use one cut
	// off only after the grace a write gets.
	_, done := s.begin(ctx, true)
	ctx, cancel := s.opCtx(ctx)
	ctx, cut := s.cutOffWrites(ctx)
	return ctx, func(err error) error {
		cut()
		cancel()
		return done(err)
	}, nil
}

// watchAll calls fn with every value of the webhooks bucket under the
// key pattern, as the bucket holds them now.
func (s *Store) watchAll(ctx context.Context, pattern string, fn func(jetstream.KeyValueEntry)) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	w, err := s.webhooks.WatchFiltered(ctx, []string{pattern}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case kve, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended before it had every value")
			}
			if kve == nil {
				return nil // the values stored when the watch began are all in
			}
			fn(kve)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// purgeWebhookCursors removes every cursor of endpoint id, leaving no
// marker behind.
func (s *Store) purgeWebhookCursors(ctx context.Context, id string) error {
	subject := s.webhookSubject("cur." + keyToken(id) + ".>")
	if _, err := s.purge(ctx, "KV_"+s.webhooks.Bucket(), subject, 0); err != nil {
		return fmt.Errorf("webhook %s: remove cursors: %w", id, err)
	}
	return nil
}

func (s *Store) leaderGetWebhook(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return s.leaderGet(ctx, s.webhooks.Bucket(), key)
}

func (s *Store) webhookSubject(key string) string { return "$KV." + s.webhooks.Bucket() + "." + key }

// casConflict reports whether a revision-checked write of the webhooks
// bucket lost to another writer. A delete's revision check answers the
// stream's own "wrong last sequence", which the client does not map.
func casConflict(err error) bool {
	var apiErr *jetstream.APIError
	return isConflict(err) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
