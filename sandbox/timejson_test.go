package sandbox_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// Every timestamp of every resource has exactly three digits of
// milliseconds, whatever its value: encoding/json alone drops trailing
// zeros.
func TestResourceTimestamps(t *testing.T) {
	ms := regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)
	for _, at := range []time.Time{
		time.Date(2026, 8, 6, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 8, 6, 12, 0, 0, 120e6, time.UTC),
		time.Date(2026, 8, 6, 12, 0, 0, 123e6, time.FixedZone("x", 3600)),
	} {
		done := at.Add(time.Second)
		turn := sandbox.Turn{ID: "turn_x", CreatedAt: at, CompletedAt: &done}
		sb := sandbox.Sandbox{ID: "c_x", CreatedAt: at, UpdatedAt: at, CurrentTurn: &turn}
		b, err := json.Marshal(sb)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			CreatedAt   json.RawMessage `json:"created_at"`
			UpdatedAt   json.RawMessage `json:"updated_at"`
			CurrentTurn struct {
				CreatedAt   json.RawMessage `json:"created_at"`
				CompletedAt json.RawMessage `json:"completed_at"`
			} `json:"current_turn"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for _, ts := range []json.RawMessage{got.CreatedAt, got.UpdatedAt, got.CurrentTurn.CreatedAt, got.CurrentTurn.CompletedAt} {
			if !ms.Match(ts) {
				t.Fatalf("timestamp %s in %s: want RFC 3339 UTC with three digits of milliseconds", ts, b)
			}
		}
		var back sandbox.Sandbox
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.CreatedAt.Equal(at) || !back.CurrentTurn.CompletedAt.Equal(done) {
			t.Fatalf("round trip: %v, %v; want %v, %v", back.CreatedAt, back.CurrentTurn.CompletedAt, at, done)
		}
	}

	t.Run("OKOpenTurn", func(t *testing.T) {
		b, err := json.Marshal(sandbox.Turn{ID: "turn_x"})
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got, want := string(got["completed_at"]), "null"; got != want {
			t.Fatalf("completed_at = %s, want %s", got, want)
		}
	})
}

func TestAppendObjectField(t *testing.T) {
	for _, tc := range []struct{ obj, want string }{
		{`{"a":1}`, `{"a":1,"k":"v"}`},
		{`{}`, `{"k":"v"}`},
	} {
		got, err := sandbox.AppendObjectField([]byte(tc.obj), "k", "v")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Fatalf("AppendObjectField(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}
