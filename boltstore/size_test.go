package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// toolTurn returns the events of a turn of n tool calls, each about 600
// bytes as stored: the running turn's state holds every one of them.
func toolTurn(turn string, n int) []*sandbox.Event {
	evs := []*sandbox.Event{{Type: sandbox.TypeTurnStarted, TurnID: turn, Data: &sandbox.TurnStarted{Input: sandbox.TextInput("go")}}}
	title := strings.Repeat("t", 300)
	for i := range n {
		evs = append(evs, &sandbox.Event{Type: sandbox.TypeToolUpdated, TurnID: turn, Data: &sandbox.ToolUpdated{
			ToolCallID: fmt.Sprintf("tool_%06d", i), Title: title, Kind: "read", Status: "completed",
			Locations: []sandbox.Location{{Path: fmt.Sprintf("src/file_%06d.go", i)}},
		}})
	}
	return evs
}

// fileUse is what the file holds: its pages in use (up to the high-water
// mark), those of them free, and the bytes of the events and of the state
// of sandbox id.
type fileUse struct {
	size, free        int64
	events, state     int64
	eventN, freePages int
}

func useOf(tb testing.TB, s *Store, id string) fileUse {
	tb.Helper()
	st, err := s.Stats(context.Background()) // materializes the WAL first
	if err != nil {
		tb.Fatal(err)
	}
	u := fileUse{size: st.FileSize, freePages: st.FreePages, free: int64(st.FreePages) * int64(s.db.Info().PageSize)}
	err = s.db.View(func(tx *bbolt.Tx) error {
		b := sandboxBucket(tx, id)
		if err := b.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			u.events += int64(len(v))
			u.eventN++
			return nil
		}); err != nil {
			return err
		}
		u.state = int64(len(b.Get(keyState)))
		if items := b.Bucket(bucketStateItems); items != nil {
			return items.ForEach(func(k, v []byte) error {
				u.state += int64(len(v))
				return nil
			})
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

func (u fileUse) String() string {
	return fmt.Sprintf("%d pages in use of %d KiB (%d free), %d events of %d KiB, state %d KiB",
		u.size/4096, u.size>>10, u.freePages, u.eventN, u.events>>10, u.state>>10)
}

// TestFileSize: the file stays near what it holds. A sandbox fills with
// turns of many tool calls, whose running turn's state grows with each
// one, materialized often; with the WAL drained, the pages in use are at
// most 1.5 times the bytes of the events and the state (plus a fixed
// margin), and after a prune of half the log the same appends again reuse
// the freed pages instead of growing the file. Written whole at every
// materialization, the growing state needed a longer run of pages each
// time than the last write had freed, and the file grew with every write.
func TestFileSize(t *testing.T) {
	const turns, tools = 4, 2000
	const walBytes = 128 << 10
	ctx := context.Background()
	// Low limits materialize every few hundred events, as a busy store
	// does every 20,000.
	s := mustOpenLimits(t, filepath.Join(t.TempDir(), "sparkles.db"), Options{}, walLimits{maxRecords: 200, maxBytes: walBytes})
	mustCreate(t, s, "c_1")
	fill := func(prefix string, turns int) {
		for n := range turns {
			evs := toolTurn(fmt.Sprintf("%s_%d", prefix, n), tools)
			for i := 0; i < len(evs); i += 50 {
				mustAppend(t, s, "c_1", evs[i:min(i+50, len(evs))]...)
			}
		}
	}
	fill("turn", turns)
	full := useOf(t, s, "c_1")
	t.Logf("filled: %v", full)
	const margin = 1 << 20 // the file's first pages, branches, the WAL's own pages
	if limit := (full.events+full.state)*3/2 + margin; full.size > limit {
		t.Errorf("after the fill the file uses %d KiB, over 1.5 times its events and state plus 1 MiB (%d KiB): %v", full.size>>10, limit>>10, full)
	}

	h, err := s.Head("c_1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, "c_1", h.LastEventID/2, 500); err != nil {
		t.Fatal(err)
	}
	pruned := useOf(t, s, "c_1")
	t.Logf("pruned half: %v", pruned)
	if pruned.freePages == 0 {
		t.Fatal("the prune freed no page")
	}
	fill("again", turns/2)
	again := useOf(t, s, "c_1")
	t.Logf("filled again: %v", again)
	// As many appends as the prune removed: the freed pages take them, and
	// the file grows by far less than they hold. Some fresh pages are still
	// needed: the WAL's values of up to 8 KiB span three pages each, which
	// the single pages a log frees do not give, and the state's items are
	// rewritten beside them. Which free runs bbolt's map freelist hands out
	// varies from run to run, and with it that part: 120-480 KiB in 25 runs
	// here, 600 KiB once in CI, for 2,336 KiB appended. Without the reuse
	// the file grows by at least what was appended.
	appended := again.events - pruned.events
	if slack := appended / 2; again.size > pruned.size+slack {
		t.Errorf("appends of %d KiB after the prune grew the file from %d to %d KiB while %d pages were free",
			appended>>10, pruned.size>>10, again.size>>10, pruned.freePages)
	}
}

// TestStateItems: a state too large for one value is kept as items and
// reads back equal, across reopening the file, as it grows, as a list
// shrinks, and once it is small again.
func TestStateItems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparkles.db")
	s := MustOpenStoreAt(t, path, Options{})
	mustCreate(t, s, "c_1")
	// Running tools: a state keeps every one of them (finished ones only
	// down to the most recent).
	evs := toolTurn("turn_1", 400)
	for _, ev := range evs[1:] {
		ev.Data.(*sandbox.ToolUpdated).Status = sandbox.ToolRunning
	}
	mustAppend(t, s, "c_1", evs[:200]...)
	// An approval asked and resolved leaves an empty list, not null.
	mustAppend(t, s, "c_1",
		&sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: "turn_1", Data: &sandbox.ApprovalRequested{ApprovalID: "appr_1", ToolCallID: "tool_000001"}},
		&sandbox.Event{Type: sandbox.TypeApprovalRequested, TurnID: "turn_1", Data: &sandbox.ApprovalRequested{ApprovalID: "appr_2", ToolCallID: "tool_000002"}})
	if err := s.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "c_1", evs[200:]...)
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeApprovalResolved, TurnID: "turn_1", Data: &sandbox.ApprovalResolved{ApprovalID: "appr_1", Decision: "allow"}})
	check := func(s *Store, want sandbox.State, layout string) {
		t.Helper()
		if err := s.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		err := s.db.View(func(tx *bbolt.Tx) error {
			b := sandboxBucket(tx, "c_1")
			items := b.Bucket(bucketStateItems) != nil
			if got := map[bool]string{true: "items", false: "whole"}[items]; got != layout {
				t.Errorf("the state is kept %s, want %s", got, layout)
			}
			got, err := readState(b, "c_1")
			if err != nil {
				return err
			}
			if d := stateDiff(*got, want); d != "" {
				t.Errorf("the state reads back otherwise: %s", d)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.State(context.Background(), "c_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Tools) != 400 || len(want.Approvals) != 1 {
		t.Fatalf("%d tools and %d approvals, want 400 and 1", len(want.Tools), len(want.Approvals))
	}
	check(s, want, "items")
	mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeApprovalResolved, TurnID: "turn_1", Data: &sandbox.ApprovalResolved{ApprovalID: "appr_2", Decision: "deny"}})
	if want, err = s.State(context.Background(), "c_1"); err != nil {
		t.Fatal(err)
	}
	check(s, want, "items")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = MustOpenStoreAt(t, path, Options{})
	got, err := s.State(context.Background(), "c_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := stateDiff(got, want); d != "" {
		t.Fatalf("after reopening the state reads otherwise: %s", d)
	}
	// A new turn starts with no tools: the state is one value again.
	mustAppend(t, s, "c_1", toolTurn("turn_2", 3)...)
	if want, err = s.State(context.Background(), "c_1"); err != nil {
		t.Fatal(err)
	}
	check(s, want, "whole")
}

// stateDiff says where two states differ, briefly; "" when they are equal.
func stateDiff(got, want sandbox.State) string {
	// As JSON: a time read back has another *time.Location.
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	switch {
	case enc(got.Sandbox) != enc(want.Sandbox):
		return fmt.Sprintf("sandbox %s, want %s", enc(got.Sandbox), enc(want.Sandbox))
	case enc(got.Turn) != enc(want.Turn):
		return fmt.Sprintf("turn %s, want %s", enc(got.Turn), enc(want.Turn))
	}
	lists := []struct {
		name      string
		got, want any
		n, m      int
	}{
		{"messages", got.Messages, want.Messages, len(got.Messages), len(want.Messages)},
		{"tools", got.Tools, want.Tools, len(got.Tools), len(want.Tools)},
		{"approvals", got.Approvals, want.Approvals, len(got.Approvals), len(want.Approvals)},
	}
	for _, l := range lists {
		if enc(l.got) != enc(l.want) || reflect.ValueOf(l.got).IsNil() != reflect.ValueOf(l.want).IsNil() {
			return fmt.Sprintf("%s: %d items (nil %t), want %d (nil %t)", l.name, l.n, reflect.ValueOf(l.got).IsNil(), l.m, reflect.ValueOf(l.want).IsNil())
		}
	}
	return ""
}
