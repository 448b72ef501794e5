package natsstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/internal/storetest"
	"github.com/sparkles-dev/sparkles/retention"
)

var (
	_ storetest.Store = (*natsstore.Store)(nil)
	_ retention.Store = (*natsstore.Store)(nil)
)

// TestConformance runs the stores' shared suite against a real NATS server
// per test. Reopening closes the store, restarts the server on the same
// directory and opens the store again: what JetStream acknowledged survives
// both.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (storetest.Store, func() storetest.Store) {
		dir := t.TempDir()
		url, stop := natstest.RunServerDir(t, dir)
		cur := mustOpenChecked(t, url)
		return cur, func() storetest.Store {
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

// mustOpenChecked opens a store whose cleanup, unless the test closed it,
// runs Check and closes it. Cleanups run last first, so it runs before the
// server started ahead of it stops.
func mustOpenChecked(tb testing.TB, url string) *natsstore.Store {
	tb.Helper()
	s := mustOpen(tb, url)
	tb.Cleanup(func() {
		if err := s.Check(); errors.Is(err, natsstore.ErrClosed) {
			return
		} else if err != nil {
			tb.Errorf("check: %v", err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return s
}

func mustOpen(tb testing.TB, url string) *natsstore.Store {
	tb.Helper()
	s, err := natsstore.Open(context.Background(), url, natsstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
