package storetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// WebhookStore is what the webhook deliveries keep in a store
// (webhook.Store): endpoints, their records opaque JSON, and a cursor per
// endpoint and sandbox.
type WebhookStore interface{ webhook.Store }

// WebhookOpener opens a fresh, empty store for one test, as Opener does;
// reopen, when not nil, closes it and opens the same backing store again.
type WebhookOpener func(t *testing.T) (s WebhookStore, reopen func() WebhookStore)

// Webhooks runs the webhook behaviours, each as a subtest on a store of
// its own.
func Webhooks(t *testing.T, open WebhookOpener) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, open WebhookOpener)
	}{
		{"PutGetList", testWebhookPutGetList},
		{"ReplaceKeepsCursors", testWebhookReplace},
		{"CursorsPerSandbox", testWebhookCursors},
		{"CursorNeverMovesBack", testWebhookCursorMonotonic},
		{"Delete", testWebhookDelete},
		{"CursorAfterDelete", testWebhookCursorAfterDelete},
		{"NotFound", testWebhookNotFound},
		{"OddIDs", testWebhookOddIDs},
		{"Reopen", testWebhookReopen},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

func openWebhookStore(t *testing.T, open WebhookOpener) WebhookStore {
	t.Helper()
	s, _ := open(t)
	return s
}

func endpointJSON(id string, v int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"url":"https://example.com/hook","v":%d}`, id, v)
}

func mustPutWebhook(tb testing.TB, s WebhookStore, id string, v int) {
	tb.Helper()
	if err := s.PutWebhook(context.Background(), id, endpointJSON(id, v)); err != nil {
		tb.Fatalf("PutWebhook(%s): %v", id, err)
	}
}

func mustSetCursor(tb testing.TB, s WebhookStore, id, sandboxID string, after uint64) {
	tb.Helper()
	if err := s.SetWebhookCursor(context.Background(), id, sandboxID, after); err != nil {
		tb.Fatalf("SetWebhookCursor(%s, %s, %d): %v", id, sandboxID, after, err)
	}
}

// wantWebhook checks the record of endpoint id.
func wantWebhook(tb testing.TB, s WebhookStore, id string, want []byte) {
	tb.Helper()
	got, err := s.Webhook(context.Background(), id)
	if err != nil {
		tb.Fatalf("Webhook(%s): %v", id, err)
	}
	if string(got) != string(want) {
		tb.Errorf("Webhook(%s) = %s, want %s", id, got, want)
	}
}

// wantWebhooks checks the listing: these records, in this order.
func wantWebhooks(tb testing.TB, s WebhookStore, want ...[]byte) {
	tb.Helper()
	got, err := s.Webhooks(context.Background())
	if err != nil {
		tb.Fatalf("Webhooks: %v", err)
	}
	if !slices.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		tb.Errorf("Webhooks = %q, want %q", got, want)
	}
}

func wantCursors(tb testing.TB, s WebhookStore, id string, want map[string]uint64) {
	tb.Helper()
	got, err := s.WebhookCursors(context.Background(), id)
	if err != nil {
		tb.Fatalf("WebhookCursors(%s): %v", id, err)
	}
	if len(got) != 0 || len(want) != 0 {
		if !maps.Equal(got, want) {
			tb.Errorf("WebhookCursors(%s) = %v, want %v", id, got, want)
		}
	}
}

func wantNotFound(tb testing.TB, what string, err error) {
	tb.Helper()
	if got, want := errType(err), sandbox.ENotFound; got != want {
		tb.Errorf("%s: error %v (type %q), want %q", what, err, got, want)
	}
}

func testWebhookPutGetList(t *testing.T, open WebhookOpener) {
	s := openWebhookStore(t, open)
	wantWebhooks(t, s)
	// Put out of order: the listing is in id order.
	for _, id := range []string{"wh_b", "wh_c", "wh_a"} {
		mustPutWebhook(t, s, id, 1)
	}
	for _, id := range []string{"wh_a", "wh_b", "wh_c"} {
		wantWebhook(t, s, id, endpointJSON(id, 1))
	}
	wantWebhooks(t, s, endpointJSON("wh_a", 1), endpointJSON("wh_b", 1), endpointJSON("wh_c", 1))
	wantCursors(t, s, "wh_a", nil)
}

func testWebhookReplace(t *testing.T, open WebhookOpener) {
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 7)
	mustPutWebhook(t, s, "wh_a", 2)
	wantWebhook(t, s, "wh_a", endpointJSON("wh_a", 2))
	wantWebhooks(t, s, endpointJSON("wh_a", 2))
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 7})
}

func testWebhookCursors(t *testing.T, open WebhookOpener) {
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	mustPutWebhook(t, s, "wh_b", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 3)
	mustSetCursor(t, s, "wh_a", "c_2", 9)
	mustSetCursor(t, s, "wh_b", "c_1", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 4)
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 4, "c_2": 9})
	wantCursors(t, s, "wh_b", map[string]uint64{"c_1": 1})
}

// A cursor only moves forward: a late write from a node that lost the
// sandbox, or two deliveries' writes crossing, leave the larger value.
func testWebhookCursorMonotonic(t *testing.T, open WebhookOpener) {
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 9)
	mustSetCursor(t, s, "wh_a", "c_1", 4)
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 9})
	mustSetCursor(t, s, "wh_a", "c_1", 12)
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 12})

	t.Run("Concurrent", func(t *testing.T) {
		const writers = 8
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Go(func() {
				errs <- s.SetWebhookCursor(context.Background(), "wh_a", "c_2", uint64(100+i))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("SetWebhookCursor: %v", err)
			}
		}
		wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 12, "c_2": 100 + writers - 1})
	})
}

func testWebhookDelete(t *testing.T, open WebhookOpener) {
	ctx := context.Background()
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	mustPutWebhook(t, s, "wh_b", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 5)
	mustSetCursor(t, s, "wh_b", "c_1", 6)
	if err := s.DeleteWebhook(ctx, "wh_a"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	_, err := s.Webhook(ctx, "wh_a")
	wantNotFound(t, "Webhook after delete", err)
	_, err = s.WebhookCursors(ctx, "wh_a")
	wantNotFound(t, "WebhookCursors after delete", err)
	wantNotFound(t, "DeleteWebhook twice", s.DeleteWebhook(ctx, "wh_a"))
	wantWebhooks(t, s, endpointJSON("wh_b", 1))
	wantCursors(t, s, "wh_b", map[string]uint64{"c_1": 6})
	// The cursors went with the endpoint: one put again under the same id
	// starts from none.
	mustPutWebhook(t, s, "wh_a", 2)
	wantCursors(t, s, "wh_a", nil)
}

// A delivery that ends after its endpoint was deleted does not bring the
// endpoint back, nor leave its cursor behind.
func testWebhookCursorAfterDelete(t *testing.T, open WebhookOpener) {
	ctx := context.Background()
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 5)
	if err := s.DeleteWebhook(ctx, "wh_a"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	wantNotFound(t, "SetWebhookCursor after delete", s.SetWebhookCursor(ctx, "wh_a", "c_1", 8))
	wantNotFound(t, "SetWebhookCursor of a new sandbox after delete", s.SetWebhookCursor(ctx, "wh_a", "c_2", 1))
	_, err := s.Webhook(ctx, "wh_a")
	wantNotFound(t, "Webhook", err)
	_, err = s.WebhookCursors(ctx, "wh_a")
	wantNotFound(t, "WebhookCursors", err)
	wantWebhooks(t, s)
	mustPutWebhook(t, s, "wh_a", 2)
	wantCursors(t, s, "wh_a", nil)
}

func testWebhookNotFound(t *testing.T, open WebhookOpener) {
	ctx := context.Background()
	s := openWebhookStore(t, open)
	mustPutWebhook(t, s, "wh_a", 1)
	calls := map[string]func() error{
		"Webhook":          func() error { _, err := s.Webhook(ctx, "wh_x"); return err },
		"WebhookCursors":   func() error { _, err := s.WebhookCursors(ctx, "wh_x"); return err },
		"DeleteWebhook":    func() error { return s.DeleteWebhook(ctx, "wh_x") },
		"SetWebhookCursor": func() error { return s.SetWebhookCursor(ctx, "wh_x", "c_1", 1) },
		"EmptyID":          func() error { _, err := s.Webhook(ctx, ""); return err },
		"EmptyIDPut":       func() error { return s.PutWebhook(ctx, "", endpointJSON("", 1)) },
		"EmptySandboxID":   func() error { return s.SetWebhookCursor(ctx, "wh_a", "", 1) },
		"Wildcard":         func() error { _, err := s.Webhook(ctx, "wh_*"); return err },
		"WildcardCursors":  func() error { _, err := s.WebhookCursors(ctx, "wh_>"); return err },
		"WildcardDelete":   func() error { return s.DeleteWebhook(ctx, "wh_*") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) { wantNotFound(t, name, call()) })
	}
	// A cursor set on an unknown endpoint made none.
	wantWebhooks(t, s, endpointJSON("wh_a", 1))
	wantCursors(t, s, "wh_a", nil)
}

// Ids are opaque to a store: one with a dot or a wildcard addresses its
// own endpoint or cursor and no other.
func testWebhookOddIDs(t *testing.T, open WebhookOpener) {
	ctx := context.Background()
	s := openWebhookStore(t, open)
	odd := []string{"wh.a", "wh_a", "wh*", "wh=2e", "wh a"}
	for i, id := range odd {
		mustPutWebhook(t, s, id, i)
		mustSetCursor(t, s, id, "c.1", uint64(10+i))
		mustSetCursor(t, s, id, "c_1", uint64(20+i))
	}
	sorted := slices.Sorted(slices.Values(odd))
	var want [][]byte
	for _, id := range sorted {
		want = append(want, endpointJSON(id, slices.Index(odd, id)))
	}
	wantWebhooks(t, s, want...)
	for i, id := range odd {
		wantWebhook(t, s, id, endpointJSON(id, i))
		wantCursors(t, s, id, map[string]uint64{"c.1": uint64(10 + i), "c_1": uint64(20 + i)})
	}
	if err := s.DeleteWebhook(ctx, "wh.a"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	wantCursors(t, s, "wh_a", map[string]uint64{"c.1": 11, "c_1": 21})
}

func testWebhookReopen(t *testing.T, open WebhookOpener) {
	s, reopen := open(t)
	if reopen == nil {
		t.Skip("the store cannot be reopened")
	}
	mustPutWebhook(t, s, "wh_b", 1)
	mustPutWebhook(t, s, "wh_a", 1)
	mustPutWebhook(t, s, "wh_a", 2)
	mustPutWebhook(t, s, "wh_c", 1)
	mustSetCursor(t, s, "wh_a", "c_1", 7)
	mustSetCursor(t, s, "wh_a", "c_2", 3)
	mustSetCursor(t, s, "wh_c", "c_1", 1)
	if err := s.DeleteWebhook(context.Background(), "wh_c"); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	wantWebhooks(t, s, endpointJSON("wh_a", 2), endpointJSON("wh_b", 1))
	wantWebhook(t, s, "wh_a", endpointJSON("wh_a", 2))
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 7, "c_2": 3})
	wantCursors(t, s, "wh_b", nil)
	_, err := s.Webhook(context.Background(), "wh_c")
	wantNotFound(t, "Webhook of an endpoint deleted before the reopen", err)
	// A cursor moves on from where it was.
	mustSetCursor(t, s, "wh_a", "c_1", 6)
	wantCursors(t, s, "wh_a", map[string]uint64{"c_1": 7, "c_2": 3})
}
