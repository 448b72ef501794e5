package natscluster_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// The store helpers these tests share with natsstore's.

var t0 = time.Date(2026, 8, 6, 14, 0, 0, 0, time.UTC)

func mustOpen(tb testing.TB, url string) *natsstore.Store {
	tb.Helper()
	s, err := natsstore.Open(context.Background(), url, natsstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func mustCreate(tb testing.TB, s *natsstore.Store, id string) {
	tb.Helper()
	sb := sandbox.Sandbox{ID: id, Object: "sandbox", Status: sandbox.StatusReady, Agent: "demo", CreatedAt: t0, UpdatedAt: t0}
	if err := s.Create(context.Background(), sb, []byte(`{}`)); err != nil {
		tb.Fatal(err)
	}
}

func textEvent(text string) *sandbox.Event {
	return &sandbox.Event{Type: sandbox.TypeMessageUpdated, TS: t0,
		Data: &sandbox.MessageUpdated{MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: text}}
}

// killConnection closes a store's NATS connection at once, as when its
// process dies: nothing more is written through it, no lease is let go,
// and a cluster on it stops answering and renewing.
func killConnection(s *natsstore.Store) { s.Conn().NATS.Close() }
