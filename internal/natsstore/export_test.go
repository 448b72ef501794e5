package natsstore

import (
	"context"

	"github.com/nats-io/nats.go"
)

// SetHooks makes s call afterSend after event i of an append went out
// (before the next), and beforeCommit once an append's events are stored
// (before its state is). Either may be nil.
func SetHooks(s *Store, afterSend func(id string, i int), beforeCommit func(id string)) {
	setHooks(s, func(h *testHooks) { h.afterSend, h.beforeCommit = afterSend, beforeCommit })
}

// setHooks replaces the test hooks of s with a copy that set changed,
// which the store's goroutines see whole or not at all.
func setHooks(s *Store, set func(h *testHooks)) {
	h := new(testHooks)
	if old := s.hooks.Load(); old != nil {
		*h = *old
	}
	set(h)
	s.hooks.Store(h)
}

// SetPublishHook makes s run each attempt to publish an append's events
// through fn, which may make it (do) or not, and returns what the writer
// is told of it.
func SetPublishHook(s *Store, fn func(do func() ([]uint64, error)) ([]uint64, error)) {
	setHooks(s, func(h *testHooks) { h.publish = fn })
}

// SetWatchHook makes the watch of s call fn with the key of every change
// of a sandbox's state before it applies it (its own writes included,
// which s knows already). fn may block: s then serves what it knew, as a
// process whose watch lags does. nil removes it.
func SetWatchHook(s *Store, fn func(key string)) {
	setHooks(s, func(h *testHooks) { h.watch = fn })
}

// SetLagging makes the direct gets of s answer not found for the keys lag
// names, as a replica of the bucket that has not caught up does; nil ends
// it.
func SetLagging(s *Store, lag func(key string) bool) {
	setHooks(s, func(h *testHooks) { h.lagging = lag })
}

// GetKey is the store's read of a key of its bucket.
func GetKey(s *Store, key string) ([]byte, uint64, error) {
	kve, err := s.kv.Get(context.Background(), key)
	if err != nil {
		return nil, 0, err
	}
	return kve.Value(), kve.Revision(), nil
}

// SetLaggingLog makes the batched direct gets of the log of s answer as a
// replica that has not caught up does: cut gives the messages the reply
// keeps, and the reply says nothing more is pending. nil ends it.
func SetLaggingLog(s *Store, cut func(msgs []*nats.Msg) []*nats.Msg) {
	setHooks(s, func(h *testHooks) { h.laggingLog = cut })
}

// SetCursorWrittenHook makes SetWebhookCursor of s call fn once it has
// written a cursor of endpoint id, before it checks that the endpoint is
// still there.
func SetCursorWrittenHook(s *Store, fn func(id string)) {
	setHooks(s, func(h *testHooks) { h.cursorWritten = fn })
}
