package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// The peer scenario needs a build of Mercure, which the main module does
// not depend on (internal/bench/mercure/run builds it and runs the
// scenario). These tests cover its parts that do not: the figures, the
// client's side of Mercure's protocol, and the Sparkles half with the
// flooding agent.

func TestAddPair(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		r := &runner{name: "peer"}
		r.addPair(pair{name: "durable events/s, 256 producers", unit: "events/s", sparkles: 30000, mercure: 1500, higher: true, target: 20,
			cond: "both", sCond: "agents", mCond: "publishers"})
		if got, want := len(r.figures), 3; got != want {
			t.Fatalf("%d figures, want %d: %+v", got, want, r.figures)
		}
		s, m, ratio := r.figures[0], r.figures[1], r.figures[2]
		if s.Name != "durable events/s, 256 producers, sparkles" || s.Value != 30000 || s.Conditions != "both; agents" {
			t.Fatalf("sparkles figure %+v", s)
		}
		if m.Name != "durable events/s, 256 producers, mercure" || m.Value != 1500 || m.Conditions != "both; publishers" {
			t.Fatalf("mercure figure %+v", m)
		}
		if ratio.Name != "durable events/s, 256 producers, sparkles/mercure" || ratio.Value != 20 || ratio.Unit != "x" {
			t.Fatalf("ratio figure %+v", ratio)
		}
		if ratio.Target != ">= 20x" || ratio.Met == nil || !*ratio.Met {
			t.Fatalf("ratio of 20 against a target of 20: target %q, met %v", ratio.Target, ratio.Met)
		}
		if !strings.Contains(ratio.Conditions, "above 1 favours Sparkles") {
			t.Fatalf("ratio conditions %q do not say which way is better", ratio.Conditions)
		}
		for _, f := range r.figures {
			if f.Scenario != "peer" {
				t.Fatalf("figure %q of scenario %q", f.Name, f.Scenario)
			}
		}
	})
	t.Run("LowerIsBetter", func(t *testing.T) {
		r := &runner{name: "peer"}
		r.addPair(pair{name: "RSS", unit: "KiB", sparkles: 30, mercure: 20, target: 1})
		ratio := r.figures[2]
		if ratio.Value != 1.5 || ratio.Met == nil || *ratio.Met || !strings.Contains(ratio.Conditions, "below 1 favours Sparkles") {
			t.Fatalf("ratio figure %+v, met %v", ratio, ratio.Met)
		}
		if r.figures[0].Conditions != "" || r.figures[1].Target != "" || r.figures[1].Met != nil {
			t.Fatalf("figures %+v", r.figures)
		}
	})
	t.Run("NoRatioOfZero", func(t *testing.T) {
		r := &runner{name: "peer"}
		r.addPair(pair{name: "events", unit: "events", sparkles: 10, mercure: 0})
		if got, want := len(r.figures), 2; got != want {
			t.Fatalf("%d figures, want %d (no ratio of a zero)", got, want)
		}
		rep := Report{Figures: r.figures}
		if err := rep.WriteJSON(&strings.Builder{}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPublisherJWT(t *testing.T) {
	// Signed by another implementation with mercure-peer's default key.
	const want = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJtZXJjdXJlIjp7InB1Ymxpc2giOlsiKiJdfX0.0qCgKKQHnaRQFJOS9N9GMuLXdCs0LuPSlB6ldoeXr4w"
	if got := publisherJWT("sparkles-bench-publisher-key-0123456789abcdef"); got != want {
		t.Fatalf("publisherJWT = %s, want %s", got, want)
	}
}

func TestStampedPayload(t *testing.T) {
	for _, size := range []int{64, 567, 1000} {
		p := stampedPayload(size)
		if len(p) != size {
			t.Fatalf("payload of %d bytes, want %d: %s", len(p), size, p)
		}
		var v struct{ Text string }
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Fatalf("payload %s: %v", p, err)
		}
		if at, ok := stampOf([]byte(p)); !ok || time.Since(time.Unix(0, at)) > time.Minute {
			t.Fatalf("stamp %d, %v in %s", at, ok, p)
		}
	}
}

func TestNextMercure(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		// What a hub sends: a comment that flushes the headers, updates,
		// a heartbeat, an update of two data lines, and one with a type.
		body := ":\n" +
			"id: urn:uuid:1\ndata: {\"a\":1}\n\n" +
			":\n" +
			"id: urn:uuid:2\ndata: one\ndata: two\n\n" +
			"event: note\nid: urn:uuid:3\nretry: 10\ndata: three\n\n"
		s := &stream{body: bufio.NewReader(strings.NewReader(body))}
		for _, want := range [][2]string{{"urn:uuid:1", `{"a":1}`}, {"urn:uuid:2", "one\ntwo"}, {"urn:uuid:3", "three"}} {
			id, data, err := s.nextMercure()
			if err != nil {
				t.Fatal(err)
			}
			if string(id) != want[0] || string(data) != want[1] {
				t.Fatalf("update %q %q, want %q %q", id, data, want[0], want[1])
			}
		}
		if _, _, err := s.nextMercure(); err == nil {
			t.Fatal("read past the end of the stream")
		}
	})
	t.Run("ErrBadLine", func(t *testing.T) {
		s := &stream{body: bufio.NewReader(strings.NewReader("bogus\n\n"))}
		if _, _, err := s.nextMercure(); err == nil || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("err = %v, want one that names the line", err)
		}
	})
}

func TestPeerNeedsMercure(t *testing.T) {
	_, err := Run(context.Background(), Config{Scenarios: []string{"peer"}, Short: true, Dir: t.TempDir(), ChildCommand: []string{os.Args[0]}})
	if err == nil || !strings.Contains(err.Error(), "--peer-mercure") {
		t.Fatalf("err = %v, want one that says the scenario needs --peer-mercure", err)
	}
}

// TestPeerSparkles runs the Sparkles half of the peer scenario's parts
// that need more than the other scenarios do: the flooding agents of a
// child server, and the store filled with tool calls, measured and
// replayed.
func TestPeerSparkles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &runner{name: "peer", cfg: Config{Short: true, Dir: t.TempDir(), ChildCommand: []string{os.Args[0]}, Log: t.Output()}}
	t.Run("Producers", func(t *testing.T) {
		res, err := sparklesProducers(ctx, r, 2, 200*time.Millisecond, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.window <= 0 || res.rate <= 0 || res.events < res.window {
			t.Fatalf("%+v: no events in the window", res)
		}
		if size := res.bytes / res.events; size < floodTitle {
			t.Fatalf("events of %d bytes of data, want more than the title's %d", size, floodTitle)
		}
	})
	t.Run("ProducersNewIDs", func(t *testing.T) {
		const warm = 100
		res, err := sparklesProducers(ctx, r, 2, 200*time.Millisecond, true, warm)
		if err != nil {
			t.Fatal(err)
		}
		if res.window <= 0 || res.events < warm+res.window {
			t.Fatalf("%+v: the window did not start after the turns held %d tool calls", res, warm)
		}
	})
	t.Run("LongTurn", func(t *testing.T) {
		dir := t.TempDir()
		const n = 300
		size, err := fillLongTurn(ctx, r, dir, n)
		if err != nil {
			t.Fatal(err)
		}
		if size < floodTitle {
			t.Fatalf("events of %d bytes of data, want more than the title's %d", size, floodTitle)
		}
		// The store the turn left opens again: the cold start's server.
		s, err := r.timedStart(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		s.stop()
		if s.took <= 0 || s.mem.RSS <= 0 {
			t.Fatalf("start %+v", s)
		}
	})
	t.Run("Log", func(t *testing.T) {
		const n = 300
		res, err := sparklesLog(ctx, r, n, 50)
		if err != nil {
			t.Fatal(err)
		}
		if res.got != n || res.replay <= 0 || res.file <= 0 || res.events <= 0 || res.inUse > res.file {
			t.Fatalf("%+v", res)
		}
		var ev struct {
			Type string `json:"type"`
			Data struct {
				ToolCallID string `json:"tool_call_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(res.sample, &ev); err != nil || ev.Type != "tool.updated" || ev.Data.ToolCallID == "" {
			t.Fatalf("sample %s is not a tool.updated event: %v", res.sample, err)
		}
	})
}

func TestAddPairMercureShown(t *testing.T) {
	r := &runner{name: "peer"}
	r.addPair(pair{name: "durable events/s, 1 producer, a new tool call per update", unit: "events/s", sparkles: 3000, mercure: 1000, higher: true, mercureShown: true})
	if got, want := len(r.figures), 2; got != want {
		t.Fatalf("%d figures, want %d (the Mercure value is another pair's): %+v", got, want, r.figures)
	}
	if s, ratio := r.figures[0], r.figures[1]; !strings.HasSuffix(s.Name, ", sparkles") || ratio.Value != 3 || !strings.HasSuffix(ratio.Name, ", sparkles/mercure") {
		t.Fatalf("figures %+v", r.figures)
	}
}

func TestAddPairSparklesShown(t *testing.T) {
	r := &runner{name: "peer"}
	r.addPair(pair{name: "cold start, against the hub", unit: "ms", sparkles: 40, mercure: 120, sparklesShown: true, target: 1})
	if got, want := len(r.figures), 2; got != want {
		t.Fatalf("%d figures, want %d (the Sparkles value is another pair's): %+v", got, want, r.figures)
	}
	if m, ratio := r.figures[0], r.figures[1]; !strings.HasSuffix(m.Name, ", mercure") || m.Value != 120 ||
		!strings.HasSuffix(ratio.Name, ", sparkles/mercure") || ratio.Value != 40.0/120 || ratio.Met == nil || !*ratio.Met {
		t.Fatalf("figures %+v", r.figures)
	}
}

func TestFloodUpdate(t *testing.T) {
	ids := map[string]bool{}
	for i := range 3 * floodTools {
		u := floodUpdate(i, false)
		ids[u["toolCallId"].(string)] = true
		if u["status"] != "in_progress" || len(u["title"].(string)) != floodTitle {
			t.Fatalf("update %d: %v", i, u)
		}
	}
	if len(ids) != floodTools {
		t.Fatalf("a cycling flood named %d tool calls, want %d", len(ids), floodTools)
	}
	clear(ids)
	for i := range 3 * floodTools {
		u := floodUpdate(i, true)
		ids[u["toolCallId"].(string)] = true
		if u["status"] != "completed" || len(u["title"].(string)) != floodTitle {
			t.Fatalf("update %d: %v", i, u)
		}
	}
	if len(ids) != 3*floodTools {
		t.Fatalf("a flood of new tool calls named %d in %d updates", len(ids), 3*floodTools)
	}
}

// TestFloodAgentNewIDs speaks ACP to the flooding agent: the prompt
// floodNew makes each update a new tool call, and a cancel ends the turn.
func TestFloodAgentNewIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunFloodAgent(ctx, inR, outW); outW.Close() }()
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	out := bufio.NewScanner(outR)
	out.Buffer(nil, 1<<20)
	type message struct {
		ID     json.RawMessage `json:"id"`
		Result struct {
			StopReason string `json:"stopReason"`
		} `json:"result"`
		Params struct {
			Update struct {
				ToolCallID string `json:"toolCallId"`
				Status     string `json:"status"`
			} `json:"update"`
		} `json:"params"`
	}
	next := func() message {
		if !out.Scan() {
			t.Fatalf("the agent's output ended: %v", out.Err())
		}
		var m message
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", out.Bytes(), err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	next()
	send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{}}`)
	next()
	send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"flood-session","prompt":[{"type":"text","text":"` + floodNew + `"}]}}`)
	seen := map[string]bool{}
	for range 100 {
		u := next().Params.Update
		if seen[u.ToolCallID] || u.Status != "completed" {
			t.Fatalf("update of tool call %q (%s) after %d new ones", u.ToolCallID, u.Status, len(seen))
		}
		seen[u.ToolCallID] = true
	}
	send(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"flood-session"}}`)
	for {
		m := next()
		if string(m.ID) == "3" {
			if m.Result.StopReason != "cancelled" {
				t.Fatalf("the prompt ended %q, want cancelled", m.Result.StopReason)
			}
			break
		}
	}
	inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSpreadNote(t *testing.T) {
	d := func(ms ...int) []time.Duration {
		var ds []time.Duration
		for _, m := range ms {
			ds = append(ds, time.Duration(m)*time.Millisecond)
		}
		return ds
	}
	// Round by round Sparkles takes 1.5, 1.2, 2, 1 and 1.25 times as long;
	// the medians alone (40 and 25 ms) would say 1.6.
	got := spreadNote(d(45, 36, 40, 20, 50), d(30, 30, 20, 20, 40))
	want := "the middle half of the starts: Sparkles 36.0–45.0 ms, Mercure 20.0–30.0 ms; the median of the rounds' ratios 1.25 x"
	if got != want {
		t.Fatalf("spreadNote:\n got %q\nwant %q", got, want)
	}
	if got := spreadNote(d(1, 2, 3), d(1, 2, 3)); got != "too few starts for their spread" {
		t.Fatalf("three starts: %q", got)
	}
}
