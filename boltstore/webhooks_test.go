package boltstore

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func TestWebhooks(t *testing.T) {
	ctx := context.Background()
	isNotFound := func(err error) bool {
		var se *sandbox.Error
		return errors.As(err, &se) && se.Type == sandbox.ENotFound
	}

	t.Run("OK", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		s := MustOpenStoreAt(t, path, Options{})
		mustCreate(t, s, "sbx_1")
		if err := s.PutWebhook(ctx, "wh_b", []byte(`{"id":"wh_b"}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutWebhook(ctx, "wh_a", []byte(`{"id":"wh_a","v":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.SetWebhookCursor(ctx, "wh_a", "sbx_1", 7); err != nil {
			t.Fatal(err)
		}
		// A new record keeps the cursors.
		if err := s.PutWebhook(ctx, "wh_a", []byte(`{"id":"wh_a","v":2}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s = MustOpenStoreAt(t, path, Options{})
		list, err := s.Webhooks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := list, [][]byte{[]byte(`{"id":"wh_a","v":2}`), []byte(`{"id":"wh_b"}`)}; !slices.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Errorf("Webhooks = %q, want %q", got, want)
		}
		got, err := s.Webhook(ctx, "wh_b")
		if err != nil || string(got) != `{"id":"wh_b"}` {
			t.Errorf("Webhook(wh_b) = %s, %v", got, err)
		}
		cursors, err := s.WebhookCursors(ctx, "wh_a")
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]uint64{"sbx_1": 7}; !maps.Equal(cursors, want) {
			t.Errorf("cursors = %v, want %v", cursors, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// db check reads every page, the webhooks bucket's too.
		if err := CheckFile(ctx, path, CompactOptions{}); err != nil {
			t.Fatalf("db check: %v", err)
		}

		s = MustOpenStoreAt(t, path, Options{})
		if err := s.DeleteWebhook(ctx, "wh_a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WebhookCursors(ctx, "wh_a"); !isNotFound(err) {
			t.Errorf("cursors of a deleted endpoint: %v, want not_found", err)
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		s := MustOpenStore(t)
		if _, err := s.Webhook(ctx, "wh_x"); !isNotFound(err) {
			t.Errorf("Webhook: %v, want not_found", err)
		}
		// A delivery racing a delete does not bring the endpoint back.
		if err := s.SetWebhookCursor(ctx, "wh_x", "sbx_1", 1); !isNotFound(err) {
			t.Errorf("SetWebhookCursor: %v, want not_found", err)
		}
		if err := s.DeleteWebhook(ctx, "wh_x"); !isNotFound(err) {
			t.Errorf("DeleteWebhook: %v, want not_found", err)
		}
		list, err := s.Webhooks(ctx)
		if err != nil || len(list) != 0 {
			t.Errorf("Webhooks = %q, %v; want none", list, err)
		}
	})
}

// TestWebhookConformance runs the stores' shared webhook behaviours on a
// fresh file per test; reopening closes the file and opens it again.
func TestWebhookConformance(t *testing.T) {
	var _ webhook.Store = (*Store)(nil)
	storetest.Webhooks(t, func(t *testing.T) (storetest.WebhookStore, func() storetest.WebhookStore) {
		path := filepath.Join(t.TempDir(), "sparkles.db")
		cur := MustOpenStoreAt(t, path, Options{})
		return cur, func() storetest.WebhookStore {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			cur = MustOpenStoreAt(t, path, Options{})
			return cur
		}
	})
}
