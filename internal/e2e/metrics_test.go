package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// noisyAgentEnv, set in a sandbox's env, makes this test binary run as that
// sandbox's agent: the demo agent, plus one update of a kind no ACP version
// has before each of its updates, which the server must count and drop.
const noisyAgentEnv = "SPARKLES_TEST_NOISY_AGENT"

// unknownKind is the update kind the noisy agent invents.
const unknownKind = "sparkles_test_unknown"

func init() {
	// Runs before TestMain: the re-executed test binary is the agent and
	// nothing else.
	if os.Getenv(noisyAgentEnv) == "1" {
		err := agent.RunDemo(context.Background(), os.Stdin, &unknownUpdates{w: os.Stdout}, os.Environ())
		if err != nil {
			fmt.Fprintln(os.Stderr, "noisy agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// unknownUpdates passes the demo agent's lines through and writes an update
// of unknownKind, in the same session, before each session/update.
type unknownUpdates struct {
	w   io.Writer
	buf []byte
}

func (u *unknownUpdates) Write(p []byte) (int, error) {
	u.buf = append(u.buf, p...)
	for {
		i := bytes.IndexByte(u.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := u.buf[:i+1]
		var m struct {
			Method string `json:"method"`
			Params struct {
				SessionID string `json:"sessionId"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) == nil && m.Method == "session/update" {
			extra, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
				"sessionId": m.Params.SessionID, "update": map[string]any{"sessionUpdate": unknownKind},
			}})
			if err != nil {
				return 0, err
			}
			if _, err := u.w.Write(append(extra, '\n')); err != nil {
				return 0, err
			}
		}
		if _, err := u.w.Write(line); err != nil {
			return 0, err
		}
		u.buf = u.buf[i+1:]
	}
}

// TestMetrics runs `sparkles serve`, does one thing of each kind the
// metrics count (turns that succeed, are denied and are canceled, a
// redacted secret, an unknown agent update, streams live and from since=0,
// retention that prunes and compacts), and checks that every series moved.
func TestMetrics(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const token = "metrics-token"
	p := startServe(t, cliEnv(t), t.TempDir(), token,
		"--retention-max-events", "5", "--retention-interval", "100ms",
		// Short flushes make many snapshots of one part, which
		// compaction then has to remove.
		"--flush-interval", "5ms",
		"--agent", "noisy="+exe)
	t.Cleanup(func() {
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("serve exited with %d:\n%s", code, p.logTail())
		}
	})
	p.waitServing()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("Readyz", func(t *testing.T) {
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusOK; got != want {
			t.Fatalf("GET /readyz = %d, want %d", got, want)
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		resp, err := http.Get(p.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusUnauthorized; got != want {
			t.Fatalf("GET /metrics without a token = %d, want %d", got, want)
		}
	})

	c := client.New(p.url, token)
	const secret = "metrics-secret-7f3a9c"
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Agent:   "noisy",
		Env:     map[string]string{noisyAgentEnv: "1"},
		Secrets: map[string]string{"DEPLOY_KEY": secret},
	})
	if err != nil {
		t.Fatal(err)
	}
	live := c.Stream(ctx, sb.ID, client.StreamOptions{})
	waitSeries(t, p, func(s series) string {
		if s.get("sparkles_stream_subscribers") < 1 {
			return "sparkles_stream_subscribers did not count the open stream"
		}
		return ""
	})

	// A turn whose approval is granted; its reply shows the environment,
	// secret included, and streams slowly enough to leave many snapshots
	// of its part for compaction.
	turn := startTurn(ctx, t, c, sb.ID, "env slow write a.txt")
	decide(ctx, t, c, live, sb.ID, turn.ID, client.Approve)
	if got, want := waitCompleted(ctx, t, live, turn.ID).Status, sandbox.TurnSucceeded; got != want {
		t.Fatalf("approved turn: status %q, want %q", got, want)
	}
	turn = startTurn(ctx, t, c, sb.ID, "write b.txt")
	decide(ctx, t, c, live, sb.ID, turn.ID, client.Deny)
	if got, want := waitCompleted(ctx, t, live, turn.ID).Status, sandbox.TurnSucceeded; got != want {
		t.Fatalf("denied turn: status %q, want %q", got, want)
	}
	turn = startTurn(ctx, t, c, sb.ID, "hang")
	waitEvent(ctx, t, live, func(ev sandbox.Event) bool {
		return ev.Type == sandbox.TypeMessageUpdated && ev.TurnID == turn.ID
	})
	if _, err := c.CancelTurn(ctx, sb.ID, turn.ID); err != nil {
		t.Fatal(err)
	}
	if got, want := waitCompleted(ctx, t, live, turn.ID).Status, sandbox.TurnCanceled; got != want {
		t.Fatalf("canceled turn: status %q, want %q", got, want)
	}
	live.Close()

	replay := c.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	waitEvent(ctx, t, replay, func(sandbox.Event) bool { return true })
	replay.Close()

	waitSeries(t, p, func(s series) string {
		var missing []string
		moved := func(name string, min float64) {
			if v, ok := s[name]; !ok {
				missing = append(missing, name+" is absent")
			} else if v < min {
				missing = append(missing, fmt.Sprintf("%s = %v, want >= %v", name, v, min))
			}
		}
		moved("sparkles_events_appended_total", 1)
		moved("sparkles_commit_batch_events_count", 1)
		moved("sparkles_commit_seconds_count", 1)
		moved("sparkles_fsync_seconds_count", 1)
		if v := s.get("sparkles_stream_subscribers"); v != 0 {
			missing = append(missing, fmt.Sprintf("sparkles_stream_subscribers = %v after every stream closed, want 0", v))
		}
		moved("sparkles_stream_deliveries_total", 1)
		moved("sparkles_stream_replays_total", 1)
		moved(`sparkles_agent_updates_dropped_total{kind="`+unknownKind+`"}`, 1)
		moved("sparkles_redactions_total", 1)
		moved("sparkles_events_pruned_total", 1)
		moved("sparkles_events_compacted_total", 1)
		moved(`sparkles_turns_total{status="succeeded"}`, 2)
		moved(`sparkles_turns_total{status="canceled"}`, 1)
		moved(`sparkles_approvals_total{decision="approved"}`, 1)
		moved(`sparkles_approvals_total{decision="denied"}`, 1)
		return strings.Join(missing, "; ")
	})

	// The secret never left the server, whatever was counted.
	recs := readEventLog(t, p, sb.ID)
	for _, ev := range recs {
		if b, _ := json.Marshal(ev); bytes.Contains(b, []byte(secret)) {
			t.Fatalf("event %d carries the secret: %s", ev.ID, b)
		}
	}
}

func startTurn(ctx context.Context, t *testing.T, c *client.Client, id, input string) sandbox.Turn {
	t.Helper()
	turn, err := c.StartTurn(ctx, id, input)
	if err != nil {
		t.Fatalf("start turn %q: %v", input, err)
	}
	return turn
}

// decide waits for the turn's approval and answers it.
func decide(ctx context.Context, t *testing.T, c *client.Client, st *client.Stream, id, turnID string, d client.Decision) {
	t.Helper()
	ev := waitEvent(ctx, t, st, func(ev sandbox.Event) bool {
		return ev.Type == sandbox.TypeApprovalRequested && ev.TurnID == turnID
	})
	appr := ev.Data.(*sandbox.ApprovalRequested)
	if _, err := c.Decide(ctx, id, appr.ApprovalID, d); err != nil {
		t.Fatalf("decide %s: %v", appr.ApprovalID, err)
	}
}

func waitCompleted(ctx context.Context, t *testing.T, st *client.Stream, turnID string) *sandbox.TurnCompleted {
	t.Helper()
	ev := waitEvent(ctx, t, st, func(ev sandbox.Event) bool {
		return ev.Type == sandbox.TypeTurnCompleted && ev.TurnID == turnID
	})
	return ev.Data.(*sandbox.TurnCompleted)
}

// waitEvent reads the stream until a durable event satisfies match. Events
// that retention removed before they were read arrive as gaps, which this
// skips: what is awaited here is the last event of its moment (a pending
// approval, a turn's end), which retention keeps.
func waitEvent(ctx context.Context, t *testing.T, st *client.Stream, match func(sandbox.Event) bool) sandbox.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if m.Kind == client.KindEvent && match(m.Event) {
			return m.Event
		}
	}
}

// series are the samples of one scrape of /metrics, by name with labels as
// the text format writes them.
type series map[string]float64

func (s series) get(name string) float64 { return s[name] }

func scrape(p *serveProc) (series, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	s := series{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("bad sample line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("bad sample line %q: %w", line, err)
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// waitSeries scrapes /metrics until check finds nothing wrong, and fails
// with what it last found when that takes too long. Retention and the
// turn-end counts land a moment after the events that cause them.
func waitSeries(t *testing.T, p *serveProc, check func(series) string) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var problem string
	var last series
	for {
		s, err := scrape(p)
		if err != nil {
			t.Fatal(err)
		}
		if problem = check(s); problem == "" {
			return
		}
		last = s
		select {
		case <-deadline.C:
			var names []string
			for name, v := range last {
				if strings.HasPrefix(name, "sparkles_") {
					names = append(names, fmt.Sprintf("%s %v", name, v))
				}
			}
			sort.Strings(names)
			t.Fatalf("%s\nsparkles series:\n%s\nserver log:\n%s", problem, strings.Join(names, "\n"), p.logTail())
		case <-tick.C:
		}
	}
}
