package translate

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkTranslateChunks measures chunks through Update with coalescing
// and redaction as a streaming turn sees them: a chunk every millisecond of
// the injected clock, Flush whenever NextFlush says so, three secrets, a new
// turn every 2000 chunks (parts of about 30 KiB).
func BenchmarkTranslateChunks(b *testing.B) {
	words := []string{"The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ", "Then ", "it ", "reads ", "main.go ", "and ", "fixes ", "a bug.\n"}
	chunks := make([]json.RawMessage, len(words))
	for i, w := range words {
		chunks[i] = json.RawMessage(fmt.Sprintf(`{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q},"messageId":"m-1"}}`, w))
	}
	c := &clock{t: epoch}
	tr := New(Config{
		SandboxID: "c_1",
		Dir:       testDir,
		DataDir:   testDataDir,
		Secrets:   []string{testSecret, "another-secret-value", "ghp_notreallyatokenbutlong"},
		Now:       c.Now,
	})
	const perTurn = 2000
	n, events := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		if n%perTurn == 0 {
			events += len(tr.EndTurn(TurnResult{StopReason: "end_turn"}))
			events += len(tr.StartTurn("", nil))
		}
		c.t = c.t.Add(time.Millisecond)
		events += len(tr.Update(chunks[n%len(chunks)]))
		if at, ok := tr.NextFlush(); ok && !c.t.Before(at) {
			events += len(tr.Flush())
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "chunks/s")
	b.ReportMetric(float64(events)/float64(n), "events/chunk")
}
