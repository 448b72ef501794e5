package natsstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/natsstore/natstest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestLogBytesLegacy: a state stored before states counted their log's
// bytes passes Check as it is, is counted from the stream when loaded, and
// is stored so with the sandbox's next write.
func TestLogBytesLegacy(t *testing.T) {
	ctx := context.Background()
	url, _ := natstest.RunServer(t)
	s := mustOpenChecked(t, url)
	mustCreate(t, s, "c_1")
	for i := range 3 {
		mustAppend(t, s, "c_1", &sandbox.Event{Type: sandbox.TypeMessageUpdated, TS: t0, Data: &sandbox.MessageUpdated{
			MessageID: "msg_1", PartID: "part_1", Kind: sandbox.PartText, Text: strings.Repeat("x", 100*i)}})
	}
	if _, err := s.Prune(ctx, "c_1", 1, 10); err != nil {
		t.Fatal(err)
	}
	want, _, err := s.LogBytes("c_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	kv, err := natstest.JetStream(t, url).KeyValue(ctx, natsstore.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	kve, err := kv.Get(ctx, "state.c_1")
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(kve.Value(), &st); err != nil {
		t.Fatal(err)
	}
	if st["log_bytes"] == nil {
		t.Fatalf("the stored state has no log_bytes: %s", kve.Value())
	}
	delete(st, "log_bytes")
	delete(st, "turn_bytes")
	old, _ := json.Marshal(st)
	if _, err := kv.Put(ctx, "state.c_1", old); err != nil {
		t.Fatal(err)
	}

	s = mustOpenChecked(t, url)
	if err := s.Check(); err != nil {
		t.Fatalf("check of a state from before the count: %v", err)
	}
	if got, _, err := s.LogBytes("c_1"); err != nil || got != want {
		t.Fatalf("LogBytes = %d, %v; want %d, counted from the stream", got, err, want)
	}
	mustAppend(t, s, "c_1", textEvent("more"))
	kve, err = kv.Get(ctx, "state.c_1")
	if err != nil {
		t.Fatal(err)
	}
	var stored sandbox.State
	if err := json.Unmarshal(kve.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if stored.LogBytes <= want {
		t.Fatalf("stored count after a write = %d, want above %d", stored.LogBytes, want)
	}
}
