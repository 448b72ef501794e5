package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// benchLog is the size of the log the replay benchmarks read.
const benchLog = 100_000

// BenchmarkReplaySSE replays a 100,000-event log over SSE from since=0 to
// a client on loopback that reads the frames' lines.
func BenchmarkReplaySSE(b *testing.B) {
	h := newHarness(b, options{})
	c := h.createSandbox()
	ids := h.appendMessages(c.ID, benchLog, 200)
	lastLine := []byte("id: " + strconv.FormatUint(ids[len(ids)-1], 10) + "\n")
	var bytesRead int64
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/sandboxes/"+c.ID+"/events/stream?since=0", nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := h.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		n := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatalf("after %d events: %v", n, err)
			}
			bytesRead += int64(len(line))
			if bytes.HasPrefix(line, []byte("id: ")) {
				n++
				if bytes.Equal(line, lastLine) {
					break
				}
			}
		}
		if n != benchLog {
			b.Fatalf("%d events, want %d", n, benchLog)
		}
		cancel()
		resp.Body.Close()
	}
	b.ReportMetric(float64(benchLog)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytesRead)/float64(b.N)/(1<<20), "MiB/op")
}

// BenchmarkEventsPage reads the same log through JSON pages of 1000. The
// client only counts events and reads the cursor, so the figure is the
// server's.
func BenchmarkEventsPage(b *testing.B) {
	h := newHarness(b, options{})
	c := h.createSandbox()
	h.appendMessages(c.ID, benchLog, 200)
	b.ResetTimer()
	for b.Loop() {
		since, n := "0", 0
		for {
			req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/sandboxes/"+c.ID+"/events?limit=1000&since="+since, nil)
			req.Header.Set("Authorization", "Bearer "+h.token)
			resp, err := h.client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				b.Fatal(err)
			}
			// The list fields follow the data array; reading them from the
			// tail keeps the client's JSON decoding out of the figure.
			var p struct {
				HasMore   bool   `json:"has_more"`
				NextSince string `json:"next_since"`
			}
			tail := body[bytes.LastIndex(body, []byte(`],"has_more":`))+1:]
			tail[0] = '{'
			if err := json.Unmarshal(tail, &p); err != nil {
				b.Fatalf("page tail %s: %v", tail, err)
			}
			n += bytes.Count(body, []byte(`"object":"sandbox.event"`))
			since = p.NextSince
			if !p.HasMore {
				break
			}
		}
		if n != benchLog {
			b.Fatalf("%d events, want %d", n, benchLog)
		}
	}
	b.ReportMetric(float64(benchLog)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
