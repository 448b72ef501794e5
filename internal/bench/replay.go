package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// runReplay measures how fast a long log is read back: over SSE from
// since=0, and through the JSON pages at the largest limit.
func runReplay(ctx context.Context, r *runner) error {
	l, closeServer, err := r.local()
	if err != nil {
		return err
	}
	defer closeServer()

	n := pick(r, 100000, 2000)
	ids, err := createSandboxes(ctx, l.coord, 1)
	if err != nil {
		return err
	}
	id := ids[0]
	r.logf("appending %d events", n)
	var last uint64
	for done := 0; done < n; {
		evs := make([]*sandbox.Event, min(1000, n-done))
		for i := range evs {
			evs[i] = newEvent(eventSize)
		}
		if err := l.coord.AppendEvents(ctx, id, evs...); err != nil {
			return err
		}
		last = evs[len(evs)-1].ID
		done += len(evs)
	}

	sse, err := median3(func() (float64, error) { return replaySSE(ctx, l, id, n, last) })
	if err != nil {
		return fmt.Errorf("sse: %w", err)
	}
	cond := fmt.Sprintf("%d events of %d-byte text, one client on loopback reading every frame; median of 3", n, eventSize)
	r.add(Figure{Name: "SSE since=0", Value: sse, Unit: "events/s", Conditions: cond,
		Target: ">= 200,000", Met: atLeast(sse, 200000)})

	pages, err := median3(func() (float64, error) { return replayPages(ctx, l, id, n) })
	if err != nil {
		return fmt.Errorf("pages: %w", err)
	}
	r.add(Figure{Name: "JSON pages, limit=1000", Value: pages, Unit: "events/s", Conditions: cond + "; sequential pages over one keep-alive connection",
		Target: ">= 200,000", Met: atLeast(pages, 200000)})
	return nil
}

func median3(f func() (float64, error)) (float64, error) {
	var v [3]float64
	for i := range v {
		var err error
		if v[i], err = f(); err != nil {
			return 0, err
		}
	}
	s := v[:]
	slices.Sort(s)
	return s[1], nil
}

// replaySSE reads the whole log over one stream and returns events/s from
// the request to the last frame.
func replaySSE(ctx context.Context, l *local, id string, n int, last uint64) (float64, error) {
	start := time.Now()
	s, err := openStream(ctx, l.addr, l.token, id, 0, 64<<10)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	defer s.closeOnDone(ctx)()
	got := 0
	for {
		f, err := s.next()
		if err != nil {
			return 0, fmt.Errorf("after %d events: %w", got, err)
		}
		if f.id == 0 {
			continue
		}
		got++
		if f.id == last {
			break
		}
	}
	elapsed := time.Since(start)
	if got != n {
		return 0, fmt.Errorf("%d events, want %d", got, n)
	}
	return perSecond(int64(got), elapsed), nil
}

// replayPages reads the whole log through the JSON pages. The client reads
// only the list fields that follow the data array, and counts events
// without decoding them, so the figure is the server's.
func replayPages(ctx context.Context, l *local, id string, n int) (float64, error) {
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer hc.CloseIdleConnections()
	since, got := "0", 0
	start := time.Now()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://"+l.addr+"/v1/sandboxes/"+id+"/events?limit=1000&since="+since, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+l.token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		var p struct {
			HasMore   bool   `json:"has_more"`
			NextSince string `json:"next_since"`
		}
		i := bytes.LastIndex(body, []byte(`],"has_more":`))
		if i < 0 {
			return 0, fmt.Errorf("page without has_more after its data: %.200s", body)
		}
		tail := body[i+1:]
		tail[0] = '{'
		if err := json.Unmarshal(tail, &p); err != nil {
			return 0, fmt.Errorf("page tail %s: %w", tail, err)
		}
		got += bytes.Count(body, []byte(`"object":"sandbox.event"`))
		since = p.NextSince
		if !p.HasMore {
			break
		}
	}
	elapsed := time.Since(start)
	if got != n {
		return 0, fmt.Errorf("%d events, want %d", got, n)
	}
	return perSecond(int64(got), elapsed), nil
}
