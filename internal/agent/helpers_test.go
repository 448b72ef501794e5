package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(agentVar); name != "" {
		run, ok := fakeAgents[name]
		if !ok {
			os.Exit(2)
		}
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// waitLimit bounds every wait in these tests; reaching it is a failure, not
// a measurement.
const waitLimit = 20 * time.Second

// testConfig runs the test binary as the named agent in dir.
func testConfig(t testing.TB, name, dir string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Command: []string{exe},
		Dir:     dir,
		// Under the race detector a process lingers a second at exit
		// unless told otherwise.
		Env:       []string{agentVar + "=" + name, "GORACE=atexit_sleep_ms=0"},
		Logger:    slog.New(slog.DiscardHandler),
		StopGrace: 5 * time.Second,
	}
}

// MustStart starts the named agent and stops it when the test ends.
func MustStart(t testing.TB, name, dir string, edit ...func(*Config)) *Conn {
	t.Helper()
	cfg := testConfig(t, name, dir)
	for _, e := range edit {
		e(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next Inbound value, failing the test if none comes.
func next(t testing.TB, c *Conn) Inbound {
	t.Helper()
	select {
	case in, ok := <-c.Inbox():
		if !ok {
			t.Fatal("inbox closed")
		}
		return in
	case <-time.After(waitLimit):
		t.Fatal("no message from the agent")
	}
	return Inbound{}
}

// until collects values up to and including the first one of kind.
func until(t testing.TB, c *Conn, kind Kind) []Inbound {
	t.Helper()
	var got []Inbound
	for {
		in := next(t, c)
		got = append(got, in)
		if in.Kind == kind {
			return got
		}
		if in.Kind == Exited {
			t.Fatalf("agent exited while waiting for %v: %v", kind, in.Err)
		}
	}
}

// update is the part of session/update params the tests look at.
type update struct {
	SessionID string `json:"sessionId"`
	Update    struct {
		SessionUpdate string `json:"sessionUpdate"`
		Content       struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		MessageID  *string         `json:"messageId"`
		ToolCallID string          `json:"toolCallId"`
		Title      string          `json:"title"`
		Kind       string          `json:"kind"`
		Status     string          `json:"status"`
		RawInput   json.RawMessage `json:"rawInput"`
		Got        []string        `json:"got"`
		Answers    []fsAnswer      `json:"answers"`
		Seq        *int            `json:"seq"`
	} `json:"update"`
}

type fsAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

func parseUpdate(t testing.TB, in Inbound) update {
	t.Helper()
	if in.Kind != Update {
		t.Fatalf("got %v, want an update", in.Kind)
	}
	var u update
	if err := json.Unmarshal(in.Params, &u); err != nil {
		t.Fatalf("update params: %v", err)
	}
	return u
}

// summary renders a turn's values as one line per value, for comparisons.
func summary(t testing.TB, ins []Inbound) []string {
	t.Helper()
	var out []string
	for _, in := range ins {
		switch in.Kind {
		case Update:
			u := parseUpdate(t, in).Update
			s := u.SessionUpdate
			if u.Status != "" {
				s += " " + u.Status
			}
			out = append(out, s)
		case PromptDone:
			out = append(out, "done "+in.StopReason)
		default:
			out = append(out, in.Kind.String())
		}
	}
	return out
}

// messageText joins the agent_message_chunk texts of a turn.
func messageText(t testing.TB, ins []Inbound) string {
	t.Helper()
	var b strings.Builder
	for _, in := range ins {
		if in.Kind != Update {
			continue
		}
		if u := parseUpdate(t, in).Update; u.SessionUpdate == "agent_message_chunk" {
			b.WriteString(u.Content.Text)
		}
	}
	return b.String()
}

// waitDone waits for the connection to end.
func waitDone(t testing.TB, c *Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(waitLimit):
		t.Fatal("connection did not end")
	}
}

// poll waits until cond holds, checking every millisecond; reaching the
// limit fails the test.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitLimit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}
