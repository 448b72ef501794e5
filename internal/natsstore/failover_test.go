package natsstore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestUnanswered: a publish whose answer never came (the connection to a
// server that went away, an election) may or may not have been stored.
// The append reads the log back and goes on: events that landed are kept
// once, not sent again; events that did not land are sent again.
func TestUnanswered(t *testing.T) {
	url, _ := natstest.RunServer(t)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	mustAppend(t, s, "c_1", textEvent("first"))
	noAnswer := context.DeadlineExceeded
	for _, tc := range []struct {
		name string
		// attempt is what the first attempt does; later attempts publish.
		attempt func(do func() ([]uint64, error)) ([]uint64, error)
	}{
		{"Landed", func(do func() ([]uint64, error)) ([]uint64, error) {
			if _, err := do(); err != nil {
				return nil, err
			}
			return nil, noAnswer
		}},
		{"Lost", func(func() ([]uint64, error)) ([]uint64, error) { return nil, noAnswer }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := true
			natsstore.SetPublishHook(s, func(do func() ([]uint64, error)) ([]uint64, error) {
				if first {
					first = false
					return tc.attempt(do)
				}
				return do()
			})
			defer natsstore.SetPublishHook(s, nil)
			before := readIDs(t, s, "c_1")
			evs := []*sandbox.Event{textEvent(tc.name + " 1"), textEvent(tc.name + " 2")}
			if err := s.Append(context.Background(), "c_1", evs, nil); err != nil {
				t.Fatalf("append whose first publish got no answer: %v", err)
			}
			got := readIDs(t, s, "c_1")
			if want := append(before, evs[0].ID, evs[1].ID); !slices.Equal(got, want) {
				t.Fatalf("log %v, want %v: the events once each, after what was there", got, want)
			}
		})
	}
}
