package client_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// chaosSeedVar reproduces a run of TestChaosReconnect: the test logs its seed.
const chaosSeedVar = "SPARKLES_CHAOS_SEED"

// chaosEvent is one durable event as a reader received it.
type chaosEvent struct {
	id  uint64
	raw []byte
}

// chaosReader reads one sandbox's events over many short connections,
// dropping each at a random moment and resuming from the last id it took.
type chaosReader struct {
	c      *client.Client
	url    string
	token  string
	id     string
	rng    *rand.Rand
	raw    bool // a plain SSE reader with Last-Event-ID instead of client.Stream
	got    []chaosEvent
	conns  int
	errors []string
}

func (r *chaosReader) last() uint64 {
	if len(r.got) == 0 {
		return 0
	}
	return r.got[len(r.got)-1].id
}

// take records an event; a reader must never see an id twice or go back.
func (r *chaosReader) take(id uint64, raw []byte) {
	if id <= r.last() && len(r.got) > 0 {
		r.errors = append(r.errors, fmt.Sprintf("id %d after %d", id, r.last()))
		return
	}
	r.got = append(r.got, chaosEvent{id: id, raw: append([]byte(nil), raw...)})
}

// run connects again and again until the log is final and read to its end.
func (r *chaosReader) run(ctx context.Context, final func() (uint64, bool)) {
	for ctx.Err() == nil && len(r.errors) == 0 {
		if last, done := final(); done && r.last() == last {
			return
		}
		r.conns++
		// The connection ends after a random number of events or a random
		// time, whichever comes first.
		budget := 1 + r.rng.IntN(40)
		cctx, cancel := context.WithTimeout(ctx, time.Duration(5+r.rng.IntN(200))*time.Millisecond)
		if r.raw {
			r.readRaw(cctx, budget)
		} else {
			r.readStream(cctx, budget)
		}
		cancel()
	}
}

func (r *chaosReader) readStream(ctx context.Context, budget int) {
	s := r.c.Stream(ctx, r.id, client.StreamOptions{Since: client.Since(r.last()), MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	defer s.Close()
	for budget > 0 {
		m, err := s.Next(ctx)
		if err != nil {
			return
		}
		if m.Kind == client.KindGap {
			r.errors = append(r.errors, fmt.Sprintf("gap %+v without any retention", m.Gap))
		}
		if m.Kind == client.KindEvent {
			r.take(m.Event.ID, m.Raw)
			budget--
		}
	}
}

func (r *chaosReader) readRaw(ctx context.Context, budget int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/v1/sandboxes/"+r.id+"/events/stream", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Last-Event-ID", strconv.FormatUint(r.last(), 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.errors = append(r.errors, fmt.Sprintf("resume after %d: status %d %s", r.last(), resp.StatusCode, b))
		return
	}
	br := bufio.NewReader(resp.Body)
	var id string
	var data []byte
	for budget > 0 {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			id = string(line[4:])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = line[6:]
		case len(line) == 0 && data != nil:
			if id != "" {
				n, err := strconv.ParseUint(id, 10, 64)
				if err != nil {
					r.errors = append(r.errors, fmt.Sprintf("id line %q", id))
					return
				}
				r.take(n, data)
				budget--
			}
			id, data = "", nil
		}
	}
}

// TestChaosReconnect streams turns on several sandboxes while 50 readers
// drop their connections at random moments and resume from their last id,
// half through client.Stream, half as plain SSE readers with Last-Event-ID.
// Each must end up with exactly the log: every id, in order, with the bytes
// of the log, none twice.
func TestChaosReconnect(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(chaosSeedVar); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedVar, v, err)
		}
	}
	t.Logf("seed %d; rerun with %s=%d", seed, chaosSeedVar, seed)
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))

	const (
		sandboxes = 4
		readers   = 50
		run       = 3 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := sparklestest.Start(t, sparklestest.WithFlushInterval(5*time.Millisecond))
	c := srv.Client

	ids := make([]string, sandboxes)
	finals := make([]atomic.Uint64, sandboxes)
	done := make([]atomic.Bool, sandboxes)
	var wg sync.WaitGroup
	driveErrs := make(chan error, sandboxes)
	for i := range ids {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = sb.ID
		wg.Add(1)
		go func() {
			defer wg.Done()
			last, turns, err := drive(ctx, c, sb.ID, time.Now().Add(run), i)
			if err != nil {
				driveErrs <- fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
			if turns == 0 {
				driveErrs <- fmt.Errorf("sandbox %s ran no turn", sb.ID)
			}
			finals[i].Store(last)
			done[i].Store(true)
		}()
	}

	rs := make([]*chaosReader, readers)
	for i := range rs {
		n := i % sandboxes
		r := &chaosReader{c: c, url: srv.URL, token: srv.Token, id: ids[n], rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(i))), raw: i%2 == 1}
		rs[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(ctx, func() (uint64, bool) { return finals[n].Load(), done[n].Load() })
		}()
	}
	wg.Wait()
	close(driveErrs)
	for err := range driveErrs {
		t.Error(err)
	}
	if ctx.Err() != nil {
		t.Fatal("readers did not catch up with the log in time")
	}

	logs := map[string][]chaosEvent{}
	for _, id := range ids {
		logs[id] = readChaosLog(t, c, id)
	}
	conns := 0
	for i, r := range rs {
		conns += r.conns
		for _, e := range r.errors {
			t.Errorf("reader %d (raw %v) of %s: %s", i, r.raw, r.id, e)
		}
		want := logs[r.id]
		if len(r.got) != len(want) {
			t.Errorf("reader %d (raw %v) of %s took %d events, the log has %d", i, r.raw, r.id, len(r.got), len(want))
			continue
		}
		for j := range want {
			if r.got[j].id != want[j].id || !bytes.Equal(r.got[j].raw, want[j].raw) {
				t.Errorf("reader %d (raw %v) of %s, event %d: took %d %s, the log has %d %s", i, r.raw, r.id, j, r.got[j].id, r.got[j].raw, want[j].id, want[j].raw)
				break
			}
		}
	}
	total := 0
	for _, l := range logs {
		total += len(l)
	}
	t.Logf("%d readers, %d connections, %d events in %d logs", readers, conns, total, sandboxes)
}

// drive runs turns on sandbox id until the deadline passes, approving or
// denying what the agent asks, and returns the log's last id once the last
// turn has completed.
func drive(ctx context.Context, c *client.Client, id string, until time.Time, n int) (last uint64, turns int, err error) {
	s := c.Stream(ctx, id, client.StreamOptions{Since: client.Since(0)})
	defer s.Close()
	prompts := []string{"slow", "please write notes.txt", "hello", "slow, then write more.txt"}
	start := func() error {
		_, err := c.StartTurn(ctx, id, prompts[(n+turns)%len(prompts)])
		turns++
		return err
	}
	if err := start(); err != nil {
		return 0, turns, err
	}
	for {
		m, err := s.Next(ctx)
		if err != nil {
			return 0, turns, err
		}
		if m.Kind != client.KindEvent {
			continue
		}
		switch d := m.Event.Data.(type) {
		case *sandbox.ApprovalRequested:
			dec := client.Approve
			if turns%3 == 0 {
				dec = client.Deny
			}
			if _, err := c.Decide(ctx, id, d.ApprovalID, dec); err != nil {
				return 0, turns, err
			}
		case *sandbox.TurnCompleted:
			if d.Status == sandbox.TurnFailed {
				return 0, turns, fmt.Errorf("turn failed: %+v", d.Error)
			}
			if time.Now().After(until) {
				return m.Event.ID, turns, nil
			}
			if err := start(); err != nil {
				return 0, turns, err
			}
		}
	}
}

// readChaosLog pages the whole log with its raw bytes.
func readChaosLog(t *testing.T, c *client.Client, id string) []chaosEvent {
	t.Helper()
	var out []chaosEvent
	since := uint64(0)
	for {
		page, err := c.Events(context.Background(), id, since, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range page.Events {
			out = append(out, chaosEvent{id: ev.ID, raw: []byte(page.Raw[i])})
		}
		if !page.HasMore {
			return out
		}
		since = page.NextSince
	}
}
