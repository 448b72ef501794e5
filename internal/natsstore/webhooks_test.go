package natsstore_test

import (
	"context"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

var _ webhook.Store = (*natsstore.Store)(nil)

// TestWebhookConformance runs the stores' shared webhook behaviours
// against a real NATS server per test. Reopening closes the store,
// restarts the server on the same directory and opens the store again.
func TestWebhookConformance(t *testing.T) {
	storetest.Webhooks(t, func(t *testing.T) (storetest.WebhookStore, func() storetest.WebhookStore) {
		dir := t.TempDir()
		url, stop := natstest.RunServerDir(t, dir)
		cur := mustOpenChecked(t, url)
		return cur, func() storetest.WebhookStore {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			stop()
			url, stop = natstest.RunServerDir(t, dir)
			cur = mustOpenChecked(t, url)
			return cur
		}
	})
}

// TestWebhookCursorRacingDelete deletes an endpoint between a cursor's
// write and SetWebhookCursor's check of the endpoint, the window a
// delivery finishing as its endpoint is deleted falls into: the cursor is
// not_found and gone, so the id put again starts with no cursors.
func TestWebhookCursorRacingDelete(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	s := mustOpenChecked(t, url)
	if err := s.PutWebhook(ctx, "wh_a", []byte(`{"id":"wh_a"}`)); err != nil {
		t.Fatal(err)
	}
	deleted := false
	natsstore.SetCursorWrittenHook(s, func(id string) {
		if deleted {
			return
		}
		deleted = true
		if err := s.DeleteWebhook(ctx, id); err != nil {
			t.Errorf("DeleteWebhook: %v", err)
		}
	})
	err := s.SetWebhookCursor(ctx, "wh_a", "c_1", 5)
	if !deleted {
		t.Fatal("the hook did not run")
	}
	if !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("SetWebhookCursor racing a delete: %v, want not_found", err)
	}
	if _, err := s.Webhook(ctx, "wh_a"); !sandbox.IsType(err, sandbox.ENotFound) {
		t.Fatalf("Webhook: %v, want not_found", err)
	}
	if err := s.PutWebhook(ctx, "wh_a", []byte(`{"id":"wh_a"}`)); err != nil {
		t.Fatal(err)
	}
	cursors, err := s.WebhookCursors(ctx, "wh_a")
	if err != nil {
		t.Fatal(err)
	}
	if len(cursors) != 0 {
		t.Errorf("cursors = %v, want none", cursors)
	}
}

// TestWebhookOutage: with the server gone, the webhook calls are answered
// unavailable as the store's others are, a write with nothing sent.
func TestWebhookOutage(t *testing.T) {
	ctx := context.Background()
	url, stop := natstest.RunServer(t)
	s := mustOpen(t, url)
	defer s.Close()
	if err := s.PutWebhook(ctx, "wh_a", []byte(`{"id":"wh_a"}`)); err != nil {
		t.Fatal(err)
	}
	stop()
	waitUnreachable(t, s)
	const cannot, cannotRead = "the event store cannot take writes", "the event store cannot be read"
	wantUnavailable(t, "PutWebhook", s.PutWebhook(ctx, "wh_a", []byte(`{}`)), cannot)
	wantUnavailable(t, "SetWebhookCursor", s.SetWebhookCursor(ctx, "wh_a", "c_1", 1), cannot)
	wantUnavailable(t, "DeleteWebhook", s.DeleteWebhook(ctx, "wh_a"), cannot)
	_, err := s.Webhook(ctx, "wh_a")
	wantUnavailable(t, "Webhook", err, cannotRead)
	_, err = s.Webhooks(ctx)
	wantUnavailable(t, "Webhooks", err, cannotRead)
	_, err = s.WebhookCursors(ctx, "wh_a")
	wantUnavailable(t, "WebhookCursors", err, cannotRead)
}
