package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// EnvChildWebhooks makes the child server let webhook endpoints be on
// loopback, as serve's --webhook-allow-private does: the webhooks
// scenario's receiver is in the parent.
const EnvChildWebhooks = "SPARKLES_BENCH_WEBHOOKS"

// runWebhooks measures webhook deliveries through the server in a child
// process to a receiver in this one that answers 204 at once: one
// endpoint for every durable event of every sandbox. First the delay from
// an event's commit to its delivery, with events appended at a steady
// rate over many sandboxes; then deliveries/s while agent processes flood
// a few sandboxes with events faster than one endpoint takes them, and
// while the backlog they left drains.
func runWebhooks(ctx context.Context, r *runner) error {
	rcv, err := startHookReceiver()
	if err != nil {
		return err
	}
	defer rcv.close()
	c, closeServer, err := r.child(ctx, EnvChildAgent+"=flood", EnvChildWebhooks+"=1")
	if err != nil {
		return err
	}
	defer closeServer()

	paced, flooding := pick(r, 20, 4), pick(r, webhook.DefaultConcurrency, 2)
	rate := pick(r, 200.0, 100.0)
	d, warm := pick(r, 10*time.Second, 500*time.Millisecond), pick(r, time.Second, 100*time.Millisecond)
	created, err := c.do(ctx, childRequest{Op: "create", N: paced + flooding})
	if err != nil {
		return err
	}
	all := created.IDs
	pacedIDs, floodIDs := all[:paced], all[paced:]
	before, err := c.do(ctx, childRequest{Op: "heads", IDs: all})
	if err != nil {
		return err
	}
	// After the sandboxes, so the endpoint's deliveries start on them at
	// once rather than at the next listing.
	ep, err := createEndpoint(ctx, c.addr, c.token, rcv.url)
	if err != nil {
		return err
	}

	r.logf("%.0f events/s over %d sandboxes for %s", rate, paced, d)
	fromCall, fromReturn, early, err := webhookDelay(ctx, c, rcv, ep, pacedIDs, rate, d, warm)
	if err != nil {
		return err
	}
	load := fmt.Sprintf("one endpoint for every durable event of %d sandboxes; %.0f events/s appended through AppendEvents (the agent runtime's path), "+
		"spread over the sandboxes, for %s, the first %s left out; to the receiver's start of the event's request, on the wall clock both processes read",
		paced, rate, d, warm)
	at := fmt.Sprintf(" at %.0f events/s over %d sandboxes", rate, paced)
	latencyFigures(r, "append to delivery"+at, &fromCall, 50*time.Millisecond,
		load+"; from the call of the event's append in the server: its commit (group commit, fsync) included, so an upper bound of commit to delivery")
	latencyFigures(r, "commit to delivery"+at, &fromReturn, 0,
		fmt.Sprintf("%s; from the return of the event's append in the server (committed, durable), as its caller read the clock, which on a busy machine "+
			"is late: %d deliveries began before it and count as 0, so a lower bound", load, early))

	r.logf("%d agents flooding their sandboxes", flooding)
	if _, err := c.do(ctx, childRequest{Op: "flood", IDs: floodIDs}); err != nil {
		return err
	}
	floodStart := time.Now()
	if err := sleepCtx(ctx, warm); err != nil {
		return err
	}
	c0, t0 := rcv.count.Load(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return err
	}
	c1, t1 := rcv.count.Load(), time.Now()
	if _, err := c.do(ctx, childRequest{Op: "unflood"}); err != nil {
		return err
	}
	floodFor := time.Since(floodStart)
	after, err := c.do(ctx, childRequest{Op: "heads", IDs: all})
	if err != nil {
		return err
	}
	var total, flooded int64
	for i := range all {
		n := int64(after.Lasts[i] - before.Lasts[i])
		total += n
		if i >= paced {
			flooded += n
		}
	}
	during := perSecond(c1-c0, t1.Sub(t0))
	fcond := fmt.Sprintf("one endpoint for every durable event; %d agent processes flood a sandbox each with tool_call updates as fast as their stdout pipes take them "+
		"(%.0f durable events/s appended: translation, group commit, fsync), more than the endpoint takes; receiver on loopback answers 204 at once, "+
		"verifying nothing; up to %d requests in flight per endpoint, one per sandbox; counted over %s after %s",
		flooding, perSecond(flooded, floodFor), webhook.DefaultConcurrency, d, warm)
	r.add(Figure{Name: fmt.Sprintf("deliveries/s, %d agents flooding", flooding), Value: during, Unit: "deliveries/s", Conditions: fcond})

	// The backlog drains with nothing else appended; steady while every
	// flooded sandbox still has events to deliver.
	d0, s0 := rcv.count.Load(), time.Now()
	deadline := s0.Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for rcv.count.Load() < total && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	d1, s1 := rcv.count.Load(), time.Now()
	left := total - d1
	drained := fmt.Sprintf("counted over %s, %d events still to deliver at its end", s1.Sub(s0).Round(time.Millisecond), max(left, 0))
	if left <= 0 {
		drained = fmt.Sprintf("until the backlog was delivered, %s: its last events went to fewer sandboxes at a time", s1.Sub(s0).Round(time.Millisecond))
	}
	drain := perSecond(d1-d0, s1.Sub(s0))
	r.add(Figure{Name: fmt.Sprintf("deliveries/s, a backlog in %d sandboxes draining", flooding), Value: drain, Unit: "deliveries/s",
		Conditions: fmt.Sprintf("the floods' backlog (%d events behind when they stopped), nothing else appended; receiver on loopback answers 204 at once; "+
			"up to %d requests in flight, one per sandbox; %s", total-d0, webhook.DefaultConcurrency, drained)})
	return nil
}

// webhookDelay appends rate events/s over ids for d and returns the delay
// of each, but those of the first warm, to its delivery from the call of
// its append and from its return; early counts the deliveries that began
// before the return was read.
func webhookDelay(ctx context.Context, c *child, rcv *hookReceiver, ep string, ids []string, rate float64, d, warm time.Duration) (fromCall, fromReturn histogram, early int, err error) {
	rcv.timing.Store(true)
	defer rcv.timing.Store(false)
	if _, err := c.do(ctx, childRequest{Op: "load", IDs: ids, Rate: rate, Size: eventSize, Times: true}); err != nil {
		return fromCall, fromReturn, 0, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return fromCall, fromReturn, 0, err
	}
	end, err := c.do(ctx, childRequest{Op: "stop"})
	if err != nil {
		return fromCall, fromReturn, 0, err
	}
	if len(end.Returned) != len(ids) {
		return fromCall, fromReturn, 0, fmt.Errorf("the load reported the appends of %d sandboxes, want %d", len(end.Returned), len(ids))
	}
	// The warm-up is counted from the first append the load made, not
	// from the request that began it, which a busy machine may answer
	// late.
	first := int64(math.MaxInt64)
	for _, times := range end.Returned {
		for _, t := range times {
			first = min(first, t.Called)
		}
	}
	if first == math.MaxInt64 {
		return fromCall, fromReturn, 0, fmt.Errorf("the load appended no event in %s", d)
	}
	from := first + warm.Nanoseconds()
	want := map[string]appendTime{} // by webhook-id
	for i, times := range end.Returned {
		for _, t := range times {
			if t.Called >= from {
				want[webhook.WebhookID(ep, ids[i], t.ID)] = t
			}
		}
	}
	if len(want) == 0 {
		return fromCall, fromReturn, 0, errors.New("no event appended after the warm-up")
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got := rcv.arrivals(want)
		if len(got) == len(want) {
			for id, at := range got {
				t := want[id]
				fromCall.record(time.Duration(at - t.Called))
				delay := time.Duration(at - t.At)
				if delay < 0 {
					delay, early = 0, early+1
				}
				fromReturn.record(delay)
			}
			return fromCall, fromReturn, early, nil
		}
		select {
		case <-wctx.Done():
			return fromCall, fromReturn, 0, fmt.Errorf("%d of %d events delivered: %w", len(got), len(want), wctx.Err())
		case <-tick.C:
		}
	}
}

// createEndpoint registers url for every durable event through the API
// and returns the endpoint's id.
func createEndpoint(ctx context.Context, addr, token, url string) (string, error) {
	body, err := json.Marshal(sandbox.WebhookParams{URL: url, Events: sandbox.DurableTypes, Description: "sparkles bench"})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/webhooks", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("create webhook: %s: %s", resp.Status, b)
	}
	var w sandbox.CreatedWebhook
	if err := json.Unmarshal(b, &w); err != nil {
		return "", fmt.Errorf("create webhook: %w", err)
	}
	return w.ID, nil
}

// hookReceiver is a webhook endpoint on loopback that answers 204 at once
// and verifies nothing, so that the figures are the server's: it counts
// requests and, while timing, notes when each webhook-id first arrived.
type hookReceiver struct {
	srv    *http.Server
	url    string
	done   chan struct{}
	count  atomic.Int64
	timing atomic.Bool

	mu      sync.Mutex
	arrived map[string]int64 // webhook-id -> ns on the wall clock
}

func startHookReceiver() (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hookReceiver{url: "http://" + ln.Addr().String() + "/hooks", done: make(chan struct{}), arrived: map[string]int64{}}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(h.done)
		_ = h.srv.Serve(ln)
	}()
	return h, nil
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now().UnixNano()
	if h.timing.Load() {
		id := req.Header.Get("webhook-id")
		h.mu.Lock()
		if _, seen := h.arrived[id]; !seen {
			h.arrived[id] = at
		}
		h.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, req.Body)
	h.count.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// arrivals returns when each of the webhook-ids of want arrived, of those
// that did.
func (h *hookReceiver) arrivals(want map[string]appendTime) map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := make(map[string]int64, len(want))
	for id := range want {
		if at, ok := h.arrived[id]; ok {
			got[id] = at
		}
	}
	return got
}

func (h *hookReceiver) close() {
	_ = h.srv.Close()
	<-h.done
}
